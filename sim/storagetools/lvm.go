package storagetools

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LVM exit statuses (tools/errors.h).
const (
	lvmInvalidCmdLine = 3
	lvmFailed         = 5
)

const lvmDeniedMsg = "  /dev/mapper/control: open failed: Operation not permitted\n  Failure to communicate with kernel device-mapper driver.\n"

var (
	lvmNameRE            = regexp.MustCompile(`^[A-Za-z0-9+_.-]+$`)
	lvmReservedPrefixes  = []string{"snapshot", "pvmove"}
	lvmReservedFragments = []string{"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_wcorig", "_mimage", "_mlog", "_rimage", "_rmeta", "_tdata", "_tmeta", "_vdata", "_imeta", "_iorig", "_pmspare", "_vorigin"}
)

// checkLVMName returns LVM's complaint about a volume group or logical
// volume name, or "".
func checkLVMName(name string) string {
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, "-") || len(name) > 127 || !lvmNameRE.MatchString(name) {
		return fmt.Sprintf("Logical volume name \"%s\" is invalid.", name)
	}
	return ""
}

func checkLVName(name string) (string, int) {
	if msg := checkLVMName(name); msg != "" {
		return msg, lvmInvalidCmdLine
	}
	for _, p := range lvmReservedPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Sprintf("Names starting \"%s\" are reserved. Please choose a different LV name.", p), lvmInvalidCmdLine
		}
	}
	if i := strings.IndexByte(name, '_'); i >= 0 {
		for _, f := range lvmReservedFragments {
			if strings.Contains(name[i:], f) {
				return fmt.Sprintf("Names including \"%s\" are reserved. Please choose a different LV name.", f), lvmInvalidCmdLine
			}
		}
	}
	return "", 0
}

// thinPoolMetaExtents is the size LVM picks for a thin pool's metadata
// volume: 64 bytes per 64 KiB chunk, at least 2 MiB, in whole extents.
func thinPoolMetaExtents(dataBytes, extentSize int64) int64 {
	meta := max(2*mib, dataBytes/1024)
	return roundUp(meta, extentSize) / extentSize
}

// freeExtents is what is left of a volume group once linear volumes and
// thin pools (data, metadata and the one shared spare metadata volume,
// sized like the largest pool metadata) are taken out.
func (vg *volumeGroup) freeExtents() int64 {
	used, spare := int64(0), int64(0)
	for _, lv := range vg.LVs {
		switch lv.Type {
		case lvLinear:
			used += lv.Extents
		case lvThinPool:
			used += lv.Extents + lv.MetaExtents
			spare = max(spare, lv.MetaExtents)
		}
	}
	return vg.ExtentCount - used - spare
}

func (vg *volumeGroup) thinSum(pool string) int64 {
	var n int64
	for _, lv := range vg.LVs {
		if lv.Type == lvThin && lv.Pool == pool {
			n += lv.Extents
		}
	}
	return n
}

// commonLVMOptions are accepted and ignored by every simulated LVM tool.
var commonLVMOptions = []option{
	{name: "config", long: "config", arg: true},
	{name: "quiet", short: 'q', long: "quiet"},
	{name: "verbose", short: 'v', long: "verbose"},
	{name: "debug", short: 'd', long: "debug"},
	{name: "yes", short: 'y', long: "yes"},
	{name: "force", short: 'f', long: "force"},
	{name: "autobackup", short: 'A', long: "autobackup", arg: true},
	{name: "noudevsync", long: "noudevsync"},
	{name: "nolocking", long: "nolocking"},
	{name: "devices", long: "devices", arg: true},
	{name: "devicesfile", long: "devicesfile", arg: true},
}

func withCommon(spec ...option) []option {
	return append(append([]option{}, commonLVMOptions...), spec...)
}

var reportOptions = withCommon(
	option{name: "options", short: 'o', long: "options", arg: true},
	option{name: "reportformat", long: "reportformat", arg: true},
	option{name: "units", long: "units", arg: true},
	option{name: "nosuffix", long: "nosuffix"},
	option{name: "noheadings", long: "noheadings"},
	option{name: "separator", long: "separator", arg: true},
	option{name: "all", short: 'a', long: "all"},
	option{name: "select", short: 'S', long: "select", arg: true},
)

// lvmSpecs are the options each simulated LVM tool accepts.
var lvmSpecs = map[string][]option{
	"lvcreate": withCommon(
		option{name: "name", short: 'n', long: "name", arg: true},
		option{name: "size", short: 'L', long: "size", arg: true},
		option{name: "extents", short: 'l', long: "extents", arg: true},
		option{name: "virtualsize", short: 'V', long: "virtualsize", arg: true},
		option{name: "thin", short: 'T', long: "thin"},
		option{name: "thinpool", long: "thinpool", arg: true},
		option{name: "type", long: "type", arg: true},
		option{name: "wipesignatures", short: 'W', long: "wipesignatures", arg: true},
		option{name: "zero", short: 'Z', long: "zero", arg: true},
		option{name: "activate", short: 'a', long: "activate", arg: true},
		option{name: "chunksize", short: 'c', long: "chunksize", arg: true},
		option{name: "poolmetadatasize", long: "poolmetadatasize", arg: true},
		option{name: "snapshot", short: 's', long: "snapshot"},
		option{name: "setactivationskip", short: 'k', long: "setactivationskip", arg: true},
		option{name: "ignoreactivationskip", short: 'K', long: "ignoreactivationskip"},
		option{name: "addtag", long: "addtag", arg: true},
	),
	"lvchange": withCommon(
		option{name: "addtag", long: "addtag", arg: true},
		option{name: "deltag", long: "deltag", arg: true},
	),
	"lvextend": withCommon(
		option{name: "size", short: 'L', long: "size", arg: true},
		option{name: "extents", short: 'l', long: "extents", arg: true},
		option{name: "resizefs", short: 'r', long: "resizefs"},
		option{name: "nofsck", short: 'n', long: "nofsck"},
	),
	"lvremove": withCommon(option{name: "select", short: 'S', long: "select", arg: true}),
	"lvs":      reportOptions,
	"vgs":      reportOptions,
}

// splitLVPath reads "vg/lv" or "/dev/vg/lv".
func splitLVPath(arg string) (vg, lv string) {
	p := strings.TrimPrefix(arg, "/dev/")
	vg, lv, _ = strings.Cut(p, "/")
	return vg, lv
}

func (t *tool) vgNotFound(vg string) int {
	t.errorf("  Volume group \"%s\" not found\n  Cannot process volume group %s\n", vg, vg)
	return lvmFailed
}

// findLV looks up vg/lv as the LVM tools do, telling the user which one is
// missing; code is the tool's exit status then (0 when both exist).
func (t *tool) findLV(vgName, lvName string) (vg *volumeGroup, lv *logicalVolume, code int) {
	vg, ok := t.st.VolumeGroups[vgName]
	if !ok {
		return nil, nil, t.vgNotFound(vgName)
	}
	if lv, ok = vg.LVs[lvName]; !ok {
		t.errorf("  Failed to find logical volume \"%s/%s\"\n", vgName, lvName)
		return nil, nil, lvmFailed
	}
	return vg, lv, 0
}

func (t *tool) lvm(name string, args []string) int {
	if t.st.DevicesDenied {
		// Without the device-mapper control node and the disks, LVM sees
		// no volume groups at all.
		t.errorf(lvmDeniedMsg)
		_, pos, _ := parseOpts(args, lvmSpecs[name])
		for _, a := range pos {
			vg, _ := splitLVPath(a)
			t.errorf("  Volume group \"%s\" not found\n  Cannot process volume group %s\n", vg, vg)
		}
		return lvmFailed
	}
	switch name {
	case "lvcreate":
		return t.lvcreate(args)
	case "lvextend":
		return t.lvextend(args)
	case "lvremove":
		return t.lvremove(args)
	case "lvchange":
		return t.lvchange(args)
	case "lvs":
		return t.lvmReport("lv", args)
	default:
		return t.lvmReport("vg", args)
	}
}

func (t *tool) lvmUsage(cmd string, err error) int {
	t.errorf("%s: %v\n\n  Error during parsing of command line.\n", cmd, err)
	return lvmInvalidCmdLine
}

func (t *tool) lvcreate(args []string) int {
	opts, pos, err := parseOpts(args, lvmSpecs["lvcreate"])
	if err != nil {
		return t.lvmUsage("lvcreate", err)
	}
	if opts.has("snapshot") {
		return t.lvcreateSnapshot(opts, pos)
	}
	if len(pos) == 0 {
		t.errorf("  Please provide a volume group name\n")
		return lvmInvalidCmdLine
	}
	if len(pos) > 1 {
		t.errorf("  fakestorage: physical volume arguments are not simulated\n")
		return lvmInvalidCmdLine
	}
	vgName, posLV, _ := strings.Cut(strings.TrimPrefix(pos[0], "/dev/"), "/")
	segType := opts.last("type")
	thinVol := opts.has("virtualsize")
	var poolName string
	switch {
	case thinVol:
		if segType != "" && segType != "thin" {
			t.errorf("  fakestorage: --type %s with --virtualsize is not simulated\n", segType)
			return lvmInvalidCmdLine
		}
		poolName = opts.last("thinpool")
		if poolName == "" && opts.has("thin") {
			poolName = posLV
		}
		if poolName == "" {
			t.errorf("  Please specify name of existing pool.\n")
			return lvmInvalidCmdLine
		}
		if opts.has("size") || opts.has("extents") {
			t.errorf("  fakestorage: creating a thin pool and a thin volume in one command is not simulated\n")
			return lvmInvalidCmdLine
		}
	case segType == "thin-pool" || opts.has("thin"):
		segType = lvThinPool
		if posLV != "" && !opts.has("name") {
			opts["name"] = []string{posLV}
		}
	case segType == "" || segType == "linear" || segType == "striped":
		segType = lvLinear
	default:
		t.errorf("  fakestorage: --type %s is not simulated\n", segType)
		return lvmInvalidCmdLine
	}
	if !thinVol {
		switch {
		case opts.has("size") && opts.has("extents"):
			t.errorf("  Please specify either size or extents (not both).\n")
			return lvmInvalidCmdLine
		case !opts.has("size") && !opts.has("extents"):
			t.errorf("  Please specify either size or extents.\n")
			return lvmInvalidCmdLine
		}
	}
	lvName := opts.last("name")
	if lvName != "" {
		if msg, code := checkLVName(lvName); msg != "" {
			t.errorf("  %s\n", msg)
			return code
		}
	}
	// Sizes are read before the volume group, as LVM parses the command
	// line first.
	var sizeBytes int64
	var extents int64
	switch {
	case thinVol:
		n, _, msg := lvmParseSize(opts.last("virtualsize"), 'm')
		if msg != "" {
			t.errorf("  %s\n  Invalid argument for --virtualsize: %s\n  Error during parsing of command line.\n", msg, opts.last("virtualsize"))
			return lvmInvalidCmdLine
		}
		sizeBytes = n
	case opts.has("size"):
		n, _, msg := lvmParseSize(opts.last("size"), 'm')
		if msg != "" {
			t.errorf("  %s\n  Invalid argument for --size: %s\n  Error during parsing of command line.\n", msg, opts.last("size"))
			return lvmInvalidCmdLine
		}
		sizeBytes = n
	default:
		n, err := strconv.ParseInt(opts.last("extents"), 10, 64)
		if err != nil || n < 0 {
			t.errorf("  fakestorage: only plain extent counts are simulated\n")
			return lvmInvalidCmdLine
		}
		extents = n
	}

	vg, ok := t.st.VolumeGroups[vgName]
	if !ok {
		return t.vgNotFound(vgName)
	}
	if lvName == "" {
		for i := 0; ; i++ {
			if _, used := vg.LVs[fmt.Sprintf("lvol%d", i)]; !used {
				lvName = fmt.Sprintf("lvol%d", i)
				break
			}
		}
	}
	if _, exists := vg.LVs[lvName]; exists {
		t.errorf("  Logical Volume \"%s\" already exists in volume group \"%s\"\n", lvName, vgName)
		return lvmFailed
	}
	if extents == 0 {
		if sizeBytes%vg.ExtentSize != 0 {
			t.printf("  Rounding up size to full physical extent %s\n", lvmDisplaySize(roundUp(sizeBytes, vg.ExtentSize)))
		}
		extents = roundUp(sizeBytes, vg.ExtentSize) / vg.ExtentSize
	}
	if extents == 0 {
		t.errorf("  Unable to create new logical volume with no extents.\n")
		return lvmFailed
	}
	lv := &logicalVolume{Type: segType, Extents: extents, UUID: lvmUUID(), Created: time.Now().Unix()}
	for _, tag := range opts["addtag"] {
		if msg := checkTag(tag); msg != "" {
			t.errorf("  %s\n", msg)
			return lvmInvalidCmdLine
		}
		lv.Tags = addTag(lv.Tags, tag)
	}
	switch {
	case thinVol:
		pool, ok := vg.LVs[poolName]
		if !ok {
			t.errorf("  Pool %s not found in Volume group %s.\n", poolName, vgName)
			return lvmFailed
		}
		if pool.Type != lvThinPool {
			t.errorf("  Logical volume %s/%s is not a thin pool.\n", vgName, poolName)
			return lvmFailed
		}
		lv.Type, lv.Pool = lvThin, poolName
		t.warnThinOvercommit(vgName, vg, poolName, extents)
	case segType == lvThinPool:
		lv.MetaExtents = thinPoolMetaExtents(extents*vg.ExtentSize, vg.ExtentSize)
		spare := int64(0)
		for _, other := range vg.LVs {
			if other.Type == lvThinPool {
				spare = max(spare, other.MetaExtents)
			}
		}
		need := extents + lv.MetaExtents + max(0, lv.MetaExtents-spare)
		if free := vg.freeExtents(); need > free {
			t.errorf("  Volume group \"%s\" has insufficient free space (%d extents): %d required.\n", vgName, free, need)
			return lvmFailed
		}
	default:
		if free := vg.freeExtents(); extents > free {
			t.errorf("  Volume group \"%s\" has insufficient free space (%d extents): %d required.\n", vgName, free, extents)
			return lvmFailed
		}
	}
	switch lv.Type {
	case lvLinear:
		// A linear LV is placed on extents a removed one may have used, and
		// LVM only zeroes its first 4 KiB (-Z y, the default): what the old
		// volume wrote further in is still there.
		if err := t.host.reuseBacking(vgName, t.host.lvPath(vgName, lvName), extents*vg.ExtentSize, opts.last("zero") != "n"); err != nil {
			t.errorf("  fakestorage: %v\n", err)
			return lvmFailed
		}
	case lvThin:
		// Thin pools zero new chunks: a thin LV reads zeros.
		if err := createBacking(t.host.lvPath(vgName, lvName), extents*vg.ExtentSize); err != nil {
			t.errorf("  fakestorage: %v\n", err)
			return lvmFailed
		}
	}
	vg.LVs[lvName] = lv
	t.printf("  Logical volume \"%s\" created.\n", lvName)
	return 0
}

// warnThinOvercommit prints LVM's warnings when thin volumes of a pool,
// counting extra extents about to be added, exceed the pool.
func (t *tool) warnThinOvercommit(vgName string, vg *volumeGroup, poolName string, extra int64) {
	pool := vg.LVs[poolName]
	sum := vg.thinSum(poolName) + extra
	if sum <= pool.Extents {
		return
	}
	t.errorf("  WARNING: Sum of all thin volume sizes (%s) exceeds the size of thin pool %s/%s (%s).\n",
		lvmDisplaySize(sum*vg.ExtentSize), vgName, poolName, lvmDisplaySize(pool.Extents*vg.ExtentSize))
	t.printf("  WARNING: You have not turned on protection against thin pools running out of space.\n")
	t.printf("  WARNING: Set activation/thin_pool_autoextend_threshold below 100 to trigger automatic extension of thin pools before they get full.\n")
}

func (t *tool) lvextend(args []string) int {
	opts, pos, err := parseOpts(args, lvmSpecs["lvextend"])
	if err != nil {
		return t.lvmUsage("lvextend", err)
	}
	if len(pos) != 1 {
		t.errorf("  Please provide the logical volume name\n")
		return lvmInvalidCmdLine
	}
	if opts.has("size") == opts.has("extents") {
		if opts.has("size") {
			t.errorf("  Please specify either size or extents but not both.\n")
		} else {
			t.errorf("  Please specify either size or extents.\n")
		}
		return lvmInvalidCmdLine
	}
	var bytes, extents int64
	var sign byte
	if opts.has("size") {
		var msg string
		bytes, sign, msg = lvmParseSize(opts.last("size"), 'm')
		if msg != "" {
			t.errorf("  %s\n  Invalid argument for --size: %s\n  Error during parsing of command line.\n", msg, opts.last("size"))
			return lvmInvalidCmdLine
		}
	} else {
		v := opts.last("extents")
		if v != "" && (v[0] == '+' || v[0] == '-') {
			sign, v = v[0], v[1:]
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			t.errorf("  fakestorage: only plain extent counts are simulated\n")
			return lvmInvalidCmdLine
		}
		extents = n
	}
	if sign == '-' {
		t.errorf("  Negative argument not permitted - use lvreduce.\n")
		return lvmInvalidCmdLine
	}
	vgName, lvName := splitLVPath(pos[0])
	vg, lv, code := t.findLV(vgName, lvName)
	if code != 0 {
		return code
	}
	if opts.has("size") {
		if bytes%vg.ExtentSize != 0 {
			t.printf("  Rounding size to boundary between physical extents: %s.\n", lvmDisplaySize(roundUp(bytes, vg.ExtentSize)))
		}
		extents = roundUp(bytes, vg.ExtentSize) / vg.ExtentSize
	}
	if sign == '+' {
		extents += lv.Extents
	}
	switch {
	case extents < lv.Extents:
		t.errorf("  New size given (%d extents) not larger than existing size (%d extents)\n", extents, lv.Extents)
		return lvmFailed
	case extents == lv.Extents:
		t.printf("  New size (%d extents) matches existing size (%d extents).\n", extents, lv.Extents)
		return 0
	}
	grow := extents - lv.Extents
	switch lv.Type {
	case lvThin:
		t.warnThinOvercommit(vgName, vg, lv.Pool, grow)
	default:
		if free := vg.freeExtents(); grow > free {
			t.errorf("  Insufficient free space: %d extents needed, but only %d available\n", grow, free)
			return lvmFailed
		}
	}
	if lv.Type != lvThinPool {
		if err := resizeBacking(t.host.lvPath(vgName, lvName), extents*vg.ExtentSize); err != nil {
			t.errorf("  fakestorage: %v\n", err)
			return lvmFailed
		}
	}
	old := lv.Extents
	lv.Extents = extents
	t.printf("  Size of logical volume %s/%s changed from %s (%d extents) to %s (%d extents).\n",
		vgName, lvName, lvmDisplaySize(old*vg.ExtentSize), old, lvmDisplaySize(extents*vg.ExtentSize), extents)
	t.printf("  Logical volume %s/%s successfully resized.\n", vgName, lvName)
	return 0
}

func (t *tool) lvremove(args []string) int {
	opts, pos, err := parseOpts(args, lvmSpecs["lvremove"])
	if err != nil {
		return t.lvmUsage("lvremove", err)
	}
	if opts.has("select") {
		t.errorf("  fakestorage: --select is not simulated\n")
		return lvmInvalidCmdLine
	}
	if len(pos) == 0 {
		t.errorf("  Please enter one or more logical volume paths\n")
		return lvmInvalidCmdLine
	}
	noPrompt := opts.has("yes") || opts.has("force")
	code := 0
	for _, arg := range pos {
		vgName, lvName := splitLVPath(arg)
		if lvName == "" {
			t.errorf("  fakestorage: removing every volume of a volume group is not simulated\n")
			code = lvmInvalidCmdLine
			continue
		}
		vg, lv, c := t.findLV(vgName, lvName)
		if c != 0 {
			code = c
			continue
		}
		if lv.Type == lvThinPool {
			var deps []string
			for name, other := range vg.LVs {
				if other.Type == lvThin && other.Pool == lvName {
					deps = append(deps, name)
				}
			}
			sort.Strings(deps)
			if len(deps) > 0 {
				if !noPrompt {
					// Without a terminal the prompt reads end of input: no.
					t.printf("  Removing pool %s/%s will remove %d dependent volume(s). Proceed? [y/n]: [n]\n", vgName, lvName, len(deps))
					t.errorf("  Logical volume %s/%s not removed.\n", vgName, lvName)
					code = lvmFailed
					continue
				}
				for _, d := range deps {
					t.removeLV(vgName, vg, d)
				}
			}
			t.removeLV(vgName, vg, lvName)
			continue
		}
		if !noPrompt {
			t.printf("  Do you really want to remove active logical volume %s/%s? [y/n]: [n]\n", vgName, lvName)
			t.errorf("  Logical volume %s/%s not removed.\n", vgName, lvName)
			code = lvmFailed
			continue
		}
		t.removeLV(vgName, vg, lvName)
	}
	return code
}

func (t *tool) removeLV(vgName string, vg *volumeGroup, lvName string) {
	switch vg.LVs[lvName].Type {
	case lvLinear:
		// The extents go back to the group with their data (see lvcreate).
		t.host.freeBacking(vgName, t.host.lvPath(vgName, lvName))
	case lvThin:
		removeBacking(t.host.lvPath(vgName, lvName), t.host.DeviceRoot())
	}
	delete(vg.LVs, lvName)
	t.printf("  Logical volume \"%s\" successfully removed.\n", lvName)
}

var (
	lvsDefaultFields = []string{"lv_name", "vg_name", "lv_attr", "lv_size", "pool_lv", "origin", "data_percent", "metadata_percent", "move_pv", "mirror_log", "copy_percent", "convert_lv"}
	vgsDefaultFields = []string{"vg_name", "pv_count", "lv_count", "snap_count", "vg_attr", "vg_size", "vg_free"}
	lvmFieldHeaders  = map[string]string{
		"lv_name": "LV", "vg_name": "VG", "lv_attr": "Attr", "lv_size": "LSize", "pool_lv": "Pool", "origin": "Origin",
		"data_percent": "Data%", "metadata_percent": "Meta%", "move_pv": "Move", "mirror_log": "Log",
		"copy_percent": "Cpy%Sync", "convert_lv": "Convert", "lv_path": "Path", "lv_uuid": "LV UUID", "segtype": "Type", "lv_tags": "LV Tags", "lv_time": "CTime",
		"pv_count": "#PV", "lv_count": "#LV", "snap_count": "#SN", "vg_attr": "Attr", "vg_size": "VSize", "vg_free": "VFree",
		"vg_extent_size": "Ext", "vg_extent_count": "#Ext", "vg_free_count": "Free", "vg_uuid": "VG UUID",
	}
	lvsFields = []string{"lv_name", "vg_name", "lv_attr", "lv_size", "pool_lv", "origin", "data_percent", "metadata_percent", "move_pv", "mirror_log", "copy_percent", "convert_lv", "lv_path", "lv_uuid", "segtype", "lv_tags", "lv_time"}
	vgsFields = []string{"vg_name", "pv_count", "lv_count", "snap_count", "vg_attr", "vg_size", "vg_free", "vg_extent_size", "vg_extent_count", "vg_free_count", "vg_uuid"}
)

// resolveField accepts a field by full name or without its lv_/vg_ prefix,
// as the LVM reporting tools do.
func resolveField(kind, f string) (string, bool) {
	known := lvsFields
	if kind == "vg" {
		known = vgsFields
	}
	for _, cand := range []string{f, kind + "_" + f} {
		for _, k := range known {
			if k == cand {
				return k, true
			}
		}
	}
	return "", false
}

type lvmRow struct {
	vg, lv string
}

func (t *tool) lvmReport(kind string, args []string) int {
	cmd := "lvs"
	defaults := lvsDefaultFields
	if kind == "vg" {
		cmd, defaults = "vgs", vgsDefaultFields
	}
	opts, pos, err := parseOpts(args, lvmSpecs[cmd])
	if err != nil {
		return t.lvmUsage(cmd, err)
	}
	if opts.has("select") {
		t.errorf("  fakestorage: --select is not simulated\n")
		return lvmInvalidCmdLine
	}
	format := opts.last("reportformat")
	if format == "" {
		format = "basic"
	}
	if format != "basic" && format != "json" {
		t.errorf("  Invalid report format \"%s\"; fakestorage simulates basic and json.\n", format)
		return lvmInvalidCmdLine
	}
	units := byte('h')
	if u := opts.last("units"); u != "" {
		if len(u) != 1 || strings.IndexByte("hHbBsSkKmMgGtTpPeE", u[0]) < 0 {
			t.errorf("  Invalid argument for --units: %s\n  Error during parsing of command line.\n", u)
			return lvmInvalidCmdLine
		}
		units = u[0]
	}
	fields := defaults
	for i, o := range opts["options"] {
		add := strings.HasPrefix(o, "+")
		list := strings.Split(strings.TrimPrefix(o, "+"), ",")
		if i == 0 && !add {
			fields = nil
		}
		fields = append(append([]string{}, fields...), list...)
	}
	for i, f := range fields {
		r, ok := resolveField(kind, f)
		if !ok {
			t.errorf("  Unrecognised field: %s\n", f)
			return lvmFailed
		}
		fields[i] = r
	}

	code := 0
	var rows []lvmRow
	addVG := func(vgName string) {
		if kind == "vg" {
			rows = append(rows, lvmRow{vg: vgName})
			return
		}
		for _, lv := range sortedKeys(t.st.VolumeGroups[vgName].LVs) {
			rows = append(rows, lvmRow{vg: vgName, lv: lv})
		}
	}
	if len(pos) == 0 {
		for _, vg := range sortedKeys(t.st.VolumeGroups) {
			addVG(vg)
		}
	}
	for _, arg := range pos {
		vgName, lvName := splitLVPath(arg)
		vg, ok := t.st.VolumeGroups[vgName]
		switch {
		case !ok:
			code = t.vgNotFound(vgName)
		case kind == "vg" || lvName == "":
			addVG(vgName)
		case vg.LVs[lvName] == nil:
			t.errorf("  Failed to find logical volume \"%s/%s\"\n", vgName, lvName)
			code = lvmFailed
		default:
			rows = append(rows, lvmRow{vg: vgName, lv: lvName})
		}
	}

	values := make([][]string, len(rows))
	for i, r := range rows {
		values[i] = make([]string, len(fields))
		for j, f := range fields {
			values[i][j] = t.lvmField(r, f, units, !opts.has("nosuffix"))
		}
	}
	if format == "json" {
		t.writeLVMJSON(kind, fields, values)
		return code
	}
	var header []string
	if !opts.has("noheadings") && len(values) > 0 {
		header = make([]string, len(fields))
		for i, f := range fields {
			header[i] = lvmFieldHeaders[f]
		}
	}
	var b strings.Builder
	if sep, ok := opts["separator"]; ok {
		if header != nil {
			b.WriteString("  " + strings.Join(header, sep[len(sep)-1]) + "\n")
		}
		for _, v := range values {
			b.WriteString("  " + strings.Join(v, sep[len(sep)-1]) + "\n")
		}
	} else {
		writeTable(&b, header, values, " ", true)
		lines := strings.SplitAfter(b.String(), "\n")
		b.Reset()
		for _, l := range lines {
			if l != "" {
				b.WriteString("  " + l)
			}
		}
	}
	t.printf("%s", b.String())
	return code
}

// writeLVMJSON prints a report as `--reportformat json` does: every value a
// string, one object per line.
func (t *tool) writeLVMJSON(kind string, fields []string, values [][]string) {
	var b strings.Builder
	b.WriteString("  {\n      \"report\": [\n          {\n              \"" + kind + "\": [\n")
	for i, row := range values {
		b.WriteString("                  {")
		for j, f := range fields {
			if j > 0 {
				b.WriteString(", ")
			}
			v, _ := json.Marshal(row[j])
			fmt.Fprintf(&b, "\"%s\":%s", f, v)
		}
		b.WriteString("}")
		if i < len(values)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("              ]\n          }\n      ]\n  }\n")
	t.printf("%s", b.String())
}

func (t *tool) lvmField(r lvmRow, f string, units byte, suffix bool) string {
	vg := t.st.VolumeGroups[r.vg]
	size := func(n int64) string { return lvmReportSize(n, units, suffix) }
	switch f {
	case "vg_name":
		return r.vg
	case "vg_size":
		return size(vg.ExtentCount * vg.ExtentSize)
	case "vg_free":
		return size(vg.freeExtents() * vg.ExtentSize)
	case "vg_extent_size":
		return size(vg.ExtentSize)
	case "vg_extent_count":
		return strconv.FormatInt(vg.ExtentCount, 10)
	case "vg_free_count":
		return strconv.FormatInt(vg.freeExtents(), 10)
	case "lv_count":
		return strconv.Itoa(len(vg.LVs))
	case "pv_count":
		return "1"
	case "snap_count":
		return "0"
	case "vg_attr":
		return "wz--n-"
	case "vg_uuid":
		return vg.UUID
	}
	lv := vg.LVs[r.lv]
	switch f {
	case "lv_name":
		return r.lv
	case "lv_size":
		return size(lv.Extents * vg.ExtentSize)
	case "lv_attr":
		switch lv.Type {
		case lvThinPool:
			if t.hasThin(vg, r.lv) {
				return "twi-aotz--"
			}
			return "twi-a-tz--"
		case lvThin:
			if lv.ActivationSkip {
				return "Vwi---tz-k"
			}
			return "Vwi-a-tz--"
		}
		return "-wi-a-----"
	case "origin":
		if _, ok := vg.LVs[lv.Origin]; !ok {
			return ""
		}
		return lv.Origin
	case "lv_time":
		return time.Unix(lv.Created, 0).Format("2006-01-02 15:04:05 -0700")
	case "pool_lv":
		return lv.Pool
	case "lv_tags":
		return strings.Join(lv.Tags, ",")
	case "segtype":
		return lv.Type
	case "lv_uuid":
		return lv.UUID
	case "lv_path":
		if lv.Type == lvThinPool {
			return ""
		}
		return filepath.Join(t.host.DeviceRoot(), r.vg, r.lv)
	case "data_percent":
		switch lv.Type {
		case lvThinPool:
			var used int64
			for name, other := range vg.LVs {
				if other.Type == lvThin && other.Pool == r.lv {
					used += allocatedBytes(t.host.lvPath(r.vg, name))
				}
			}
			return percent(used, lv.Extents*vg.ExtentSize)
		case lvThin:
			return percent(allocatedBytes(t.host.lvPath(r.vg, r.lv)), lv.Extents*vg.ExtentSize)
		}
		return ""
	case "metadata_percent":
		if lv.Type == lvThinPool {
			return "0.00"
		}
		return ""
	}
	return ""
}

func (t *tool) hasThin(vg *volumeGroup, pool string) bool {
	for _, lv := range vg.LVs {
		if lv.Type == lvThin && lv.Pool == pool {
			return true
		}
	}
	return false
}

func percent(part, whole int64) string {
	if whole <= 0 {
		return "0.00"
	}
	return fmt.Sprintf("%.2f", float64(part)*100/float64(whole))
}

var lvmTagRE = regexp.MustCompile(`^[A-Za-z0-9_+.\-/=!:&#]+$`)

// checkTag returns LVM's complaint about a tag, or "".
func checkTag(tag string) string {
	if len(tag) > 1024 || !lvmTagRE.MatchString(tag) {
		return fmt.Sprintf("Invalid argument for --addtag: %s", tag)
	}
	return ""
}

func addTag(tags []string, tag string) []string {
	for _, t := range tags {
		if t == tag {
			return tags
		}
	}
	return append(tags, tag)
}

// lvchange simulates only adding and deleting tags.
func (t *tool) lvchange(args []string) int {
	opts, pos, err := parseOpts(args, lvmSpecs["lvchange"])
	if err != nil {
		return t.lvmUsage("lvchange", err)
	}
	if !opts.has("addtag") && !opts.has("deltag") {
		t.errorf("  fakestorage: lvchange simulates only --addtag and --deltag\n")
		return lvmInvalidCmdLine
	}
	if len(pos) == 0 {
		t.errorf("  Please give logical volume path(s).\n")
		return lvmInvalidCmdLine
	}
	for _, tag := range opts["addtag"] {
		if msg := checkTag(tag); msg != "" {
			t.errorf("  %s\n", msg)
			return lvmInvalidCmdLine
		}
	}
	code := 0
	for _, arg := range pos {
		vgName, lvName := splitLVPath(arg)
		_, lv, c := t.findLV(vgName, lvName)
		if c != 0 {
			code = c
			continue
		}
		for _, tag := range opts["deltag"] {
			kept := lv.Tags[:0]
			for _, x := range lv.Tags {
				if x != tag {
					kept = append(kept, x)
				}
			}
			lv.Tags = kept
		}
		for _, tag := range opts["addtag"] {
			lv.Tags = addTag(lv.Tags, tag)
		}
		t.printf("  Logical volume %s/%s changed.\n", vgName, lvName)
	}
	return code
}
