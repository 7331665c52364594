// Package agentconfig reads the pillar-agent configuration file (the file the
// chart's ConfigMap `<fullname>-agent-config` holds and passes with --config).
//
// The file is decoded strictly by walking YAML nodes, so every problem is
// reported with the path of the offending key (e.g. `backends[1].zfs.properties`)
// and all problems are reported at once. docs/pillar-agent-config.md is the
// user-facing description of the format.
package agentconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Volume types and provisioning modes the agent accepts.
const (
	VolumeTypeZvol = "zvol"

	ProvisioningLinear = "linear"
	ProvisioningThin   = "thin"
)

// Config is the decoded agent configuration. Only `backends` may appear at
// the top level: the chart renders nothing else into the file, and the
// agent's other settings (listen address, mTLS) are flags.
type Config struct {
	Backends []Backend
}

// Backend is one entry of `backends`; exactly one of ZFS and LVM is set.
type Backend struct {
	ZFS *ZFS
	LVM *LVM
}

// ZFS places volumes as zvols in a pool, optionally under a parent dataset.
type ZFS struct {
	// Pool is the zpool name.
	Pool string
	// VolumeType is always VolumeTypeZvol once parsed.
	VolumeType string
	// ParentDataset is relative to the pool ("k8s/vols" means
	// <pool>/k8s/vols); empty means the pool root.
	ParentDataset string
}

// LVM places volumes as logical volumes in a volume group.
type LVM struct {
	VolumeGroup string
	// ThinPool is the thin pool LV (in VolumeGroup) thin volumes are carved from.
	ThinPool string
	// ProvisioningMode is ProvisioningLinear or ProvisioningThin: the mode used
	// when a request names none.
	ProvisioningMode string
	// OverprovisionRatio, when set (at least 1; needs ThinPool), makes the
	// thin pool's capacity a budget of virtual sizes: pool size times the
	// ratio, less the sizes of the thin volumes in it. Zero: the pool's
	// free data space, however much has been promised.
	OverprovisionRatio float64
}

// Name is the routing key of the backend: the pool or volume group name.
func (b Backend) Name() string {
	switch {
	case b.ZFS != nil:
		return b.ZFS.Pool
	case b.LVM != nil:
		return b.LVM.VolumeGroup
	}
	return ""
}

// FieldError is one configuration problem at one path.
type FieldError struct {
	// Path locates the key, e.g. "backends[1].zfs.properties"; empty for
	// problems with the whole document.
	Path string
	Msg  string
	// Line is the 1-based line in the file, 0 when unknown.
	Line int
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// FieldErrors unpacks the problems of a Parse or Load error, in file order.
func FieldErrors(err error) []*FieldError {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*FieldError
		for _, e := range j.Unwrap() {
			out = append(out, FieldErrors(e)...)
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []*FieldError{fe}
	}
	return nil
}

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read agent config: %w", err)
	}
	return Parse(data)
}

// Parse decodes and validates a configuration document. The error, when not
// nil, joins one *FieldError per problem.
func Parse(data []byte) (*Config, error) {
	root, err := decodeSingleDocument(data)
	if err != nil {
		return nil, err
	}
	p := &parser{}
	cfg := p.config(root)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return cfg, nil
}

func decodeSingleDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			// S-AG-1: an empty file has no backends.
			return nil, &FieldError{Path: "backends", Msg: "at least one backend is required; the file is empty"}
		}
		return nil, &FieldError{Msg: fmt.Sprintf("not valid YAML: %v", err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, &FieldError{Msg: fmt.Sprintf("not valid YAML: %v", err)}
		}
		return nil, &FieldError{Msg: "only one YAML document is allowed", Line: line}
	}
	return &doc, nil
}

type parser struct {
	errs []error
}

func (p *parser) fail(path string, n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Line: line})
}

// deref follows document wrappers and aliases to the node that holds the value.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		case yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			return "a string"
		}
		return "the " + strings.TrimPrefix(n.Tag, "!!") + " " + fmt.Sprintf("%q", n.Value)
	}
	return "an unexpected node"
}

// field is one key of a mapping with its value.
type field struct {
	key   *yaml.Node
	value *yaml.Node
}

// mapping returns the keys of a mapping node, reporting duplicate keys and
// keys that are neither known nor handled by the caller (S-AG-8).
func (p *parser) mapping(path string, n *yaml.Node, known []string, handled ...string) map[string]field {
	out := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		name := k.Value
		sub := join(path, name)
		if k.Kind != yaml.ScalarNode {
			p.fail(path, k, "keys must be plain strings")
			continue
		}
		if prev, dup := out[name]; dup {
			p.fail(sub, k, "duplicate key (first set on line %d)", prev.key.Line)
			continue
		}
		out[name] = field{key: k, value: v}
		if !contains(known, name) && !contains(handled, name) {
			// S-AG-8: unknown keys are refused with their path.
			p.fail(sub, k, "unknown key (allowed: %s)", strings.Join(known, ", "))
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// str reads an optional string scalar. set is false when the key is absent
// or null; ok is false when it is absent, null or invalid (already reported).
func (p *parser) str(path string, fields map[string]field, key string) (val string, node *yaml.Node, set, ok bool) {
	f, present := fields[key]
	if !present {
		return "", nil, false, false
	}
	sub := join(path, key)
	v := deref(f.value)
	if isNull(v) {
		return "", f.key, false, false
	}
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		hint := ""
		if v.Kind == yaml.ScalarNode {
			hint = "; quote it"
		}
		p.fail(sub, f.value, "must be a string, got %s%s", kindName(v), hint)
		return "", f.value, true, false
	}
	if v.Value == "" {
		p.fail(sub, f.value, "must not be empty")
		return "", f.value, true, false
	}
	return v.Value, v, true, true
}

var (
	topKeys = []string{"backends"}
	// The keys mirror the placement fields of the store resource's
	// spec.backend (S-AG-6); unknown-key errors list them in this order.
	entryKeys = []string{"zfs", "lvm"}
	zfsKeys   = []string{"pool", "volumeType", "parentDataset"}
	lvmKeys   = []string{"volumeGroup", "thinPool", "provisioningMode", "overprovisionRatio"}
)

func (p *parser) config(doc *yaml.Node) *Config {
	root := deref(doc)
	if isNull(root) {
		// S-AG-1
		p.fail("backends", doc, "at least one backend is required; the file is empty")
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.fail("", root, "the file must be a mapping with a top-level backends list, got %s", kindName(root))
		return nil
	}
	top := p.mapping("", root, topKeys)
	f, ok := top["backends"]
	list := deref(f.value)
	switch {
	case !ok:
		// S-AG-1
		p.fail("backends", root, "at least one backend is required; the key is missing")
		return nil
	case isNull(list):
		p.fail("backends", f.key, "at least one backend is required; the list is empty")
		return nil
	case list.Kind != yaml.SequenceNode:
		p.fail("backends", f.value, "must be a list, got %s", kindName(list))
		return nil
	case len(list.Content) == 0:
		p.fail("backends", f.value, "at least one backend is required; the list is empty")
		return nil
	}

	cfg := &Config{}
	// owners records which entry first named a pool or group (S-AG-7).
	type owner struct {
		index int
		kind  string
	}
	owners := map[string]owner{}
	for i, item := range list.Content {
		path := fmt.Sprintf("backends[%d]", i)
		b, nameNode := p.backend(path, item)
		name := b.Name()
		if name == "" {
			continue
		}
		kind, keyPath := "ZFS pool", path+".zfs.pool"
		if b.LVM != nil {
			kind, keyPath = "LVM volume group", path+".lvm.volumeGroup"
		}
		if prev, dup := owners[name]; dup {
			// S-AG-7: volumes are routed by name alone, so a name may
			// belong to one entry only.
			if prev.kind == kind {
				p.fail(keyPath, nameNode, "%s %q is already configured by backends[%d]; each pool and volume group may appear once", kind, name, prev.index)
			} else {
				p.fail(keyPath, nameNode, "%s %q has the same name as the %s of backends[%d]; pool and volume group names must differ because volumes are routed by name", kind, name, prev.kind, prev.index)
			}
		} else {
			owners[name] = owner{index: i, kind: kind}
		}
		cfg.Backends = append(cfg.Backends, b)
	}
	return cfg
}

// backend decodes one entry and returns the node of its pool or group name.
// It returns what it could read even when the entry has errors, so duplicate
// names are still found.
func (p *parser) backend(path string, item *yaml.Node) (Backend, *yaml.Node) {
	n := deref(item)
	if isNull(n) || n.Kind != yaml.MappingNode {
		what := "nothing"
		if !isNull(n) {
			what = kindName(n)
		}
		p.fail(path, item, "must be a mapping with exactly one of zfs or lvm, got %s", what)
		return Backend{}, nil
	}
	fields := p.mapping(path, n, entryKeys)
	zf, hasZFS := fields["zfs"]
	lf, hasLVM := fields["lvm"]
	switch {
	case hasZFS && hasLVM:
		// S-AG-3
		p.fail(path, n, "sets both zfs and lvm; exactly one is allowed per entry")
		return Backend{}, nil
	case !hasZFS && !hasLVM:
		// S-AG-3
		p.fail(path, n, "sets neither zfs nor lvm; exactly one is required")
		return Backend{}, nil
	case hasZFS:
		z, name := p.zfs(path+".zfs", zf)
		return Backend{ZFS: z}, name
	default:
		l, name := p.lvm(path+".lvm", lf)
		return Backend{LVM: l}, name
	}
}

// section returns the mapping under an entry's zfs/lvm key.
func (p *parser) section(path string, f field, kind string) *yaml.Node {
	n := deref(f.value)
	if isNull(n) {
		p.fail(path, f.key, "must be a mapping of %s settings, got nothing", kind)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.fail(path, f.value, "must be a mapping of %s settings, got %s", kind, kindName(n))
		return nil
	}
	return n
}

func (p *parser) zfs(path string, f field) (*ZFS, *yaml.Node) {
	n := p.section(path, f, "ZFS")
	if n == nil {
		return nil, nil
	}
	// properties is a field of the store resource, so it gets its own
	// explanation instead of the generic unknown-key error (S-AG-4).
	fields := p.mapping(path, n, zfsKeys, "properties")
	z := &ZFS{VolumeType: VolumeTypeZvol}

	if pf, ok := fields["properties"]; ok {
		// S-AG-4
		p.fail(path+".properties", pf.key, "ZFS properties are per-volume settings of the store resource, storage-class overrides or the PVC backend document; the agent configuration only places volumes")
	}
	pool, poolNode, set, ok := p.str(path, fields, "pool")
	switch {
	case !set:
		// S-AG-4: pool is required.
		p.fail(path+".pool", n, "required: the name of the zpool")
	case ok:
		if msg := checkZFSPoolName(pool); msg != "" {
			p.fail(path+".pool", poolNode, "%s", msg)
		}
		z.Pool = pool
	}
	if vt, v, _, ok := p.str(path, fields, "volumeType"); ok && vt != VolumeTypeZvol {
		// S-AG-4: only zvols are block devices the target can export.
		p.fail(path+".volumeType", v, "%q is not supported; the only volume type is %q", vt, VolumeTypeZvol)
	}
	if pd, v, _, ok := p.str(path, fields, "parentDataset"); ok {
		if msg := checkParentDataset(pd); msg != "" {
			p.fail(path+".parentDataset", v, "%s", msg)
		}
		z.ParentDataset = pd
	}
	return z, poolNode
}

func (p *parser) lvm(path string, f field) (*LVM, *yaml.Node) {
	n := p.section(path, f, "LVM")
	if n == nil {
		return nil, nil
	}
	fields := p.mapping(path, n, lvmKeys)
	l := &LVM{ProvisioningMode: ProvisioningLinear}

	vg, vgNode, set, ok := p.str(path, fields, "volumeGroup")
	switch {
	case !set:
		// S-AG-5: volumeGroup is required.
		p.fail(path+".volumeGroup", n, "required: the name of the LVM volume group")
	case ok:
		if msg := checkLVMName(vg); msg != "" {
			p.fail(path+".volumeGroup", vgNode, "%s", msg)
		}
		l.VolumeGroup = vg
	}
	tp, tpNode, tpSet, ok := p.str(path, fields, "thinPool")
	if ok {
		if msg := checkLVMName(tp); msg != "" {
			p.fail(path+".thinPool", tpNode, "%s", msg)
		}
		l.ThinPool = tp
	}
	if mode, v, _, ok := p.str(path, fields, "provisioningMode"); ok {
		switch mode {
		case ProvisioningLinear:
		case ProvisioningThin:
			l.ProvisioningMode = mode
			if !tpSet {
				// Thin volumes are carved from a thin pool; the agent
				// creates none itself, so the entry must name one.
				p.fail(path+".provisioningMode", v, "%q requires thinPool, the thin pool volumes are created in", ProvisioningThin)
			}
		default:
			// S-AG-5
			p.fail(path+".provisioningMode", v, "%q is not a provisioning mode; use %q or %q", mode, ProvisioningLinear, ProvisioningThin)
		}
	}
	if f, present := fields["overprovisionRatio"]; present {
		v := deref(f.value)
		ratio, err := strconv.ParseFloat(v.Value, 64)
		switch {
		case v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || err != nil || math.IsNaN(ratio) || math.IsInf(ratio, 0) || ratio < 1:
			p.fail(path+".overprovisionRatio", f.value, "must be a number of at least 1 (e.g. 1, 2.5), got %q", v.Value)
		case !tpSet:
			p.fail(path+".overprovisionRatio", v, "needs thinPool: only thin volumes are overprovisioned")
		default:
			l.OverprovisionRatio = ratio
		}
	}
	return l, vgNode
}

var (
	zfsComponent = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
	lvmName      = regexp.MustCompile(`^[A-Za-z0-9+_.-]+$`)
)

// checkZFSPoolName applies zpool's naming rules, so a typo fails at start-up
// rather than as "no such pool" later.
func checkZFSPoolName(name string) string {
	if strings.Contains(name, "/") {
		return fmt.Sprintf("%q is a dataset path, not a pool name; put the pool in pool and the rest in parentDataset", name)
	}
	if !zfsComponent.MatchString(name) || !isLetter(name[0]) {
		return fmt.Sprintf("%q is not a valid pool name: it must start with a letter and contain only letters, digits, '_', '-', '.' and ':'", name)
	}
	for _, reserved := range []string{"mirror", "raidz", "draid", "spare", "log"} {
		if strings.HasPrefix(name, reserved) {
			return fmt.Sprintf("%q is not a valid pool name: names beginning with %q are reserved by zpool", name, reserved)
		}
	}
	return ""
}

func checkParentDataset(pd string) string {
	if strings.HasPrefix(pd, "/") || strings.HasSuffix(pd, "/") {
		return fmt.Sprintf("%q must be relative to the pool, without leading or trailing '/'", pd)
	}
	for _, c := range strings.Split(pd, "/") {
		if c == "" || !zfsComponent.MatchString(c) {
			return fmt.Sprintf("%q is not a valid dataset path: components must be non-empty and contain only letters, digits, '_', '-', '.' and ':'", pd)
		}
	}
	return ""
}

// checkLVMName applies LVM's rules for volume group and logical volume names.
func checkLVMName(name string) string {
	switch {
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not a valid LVM name", name)
	case strings.HasPrefix(name, "-"):
		return fmt.Sprintf("%q is not a valid LVM name: it must not start with '-'", name)
	case len(name) > 127:
		return fmt.Sprintf("%q is not a valid LVM name: longer than 127 characters", name)
	case !lvmName.MatchString(name):
		return fmt.Sprintf("%q is not a valid LVM name: only letters, digits and '+', '_', '.', '-' are allowed", name)
	}
	return ""
}

func isLetter(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
