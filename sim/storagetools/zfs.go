package storagetools

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ZFS exit statuses: 1 for a failed operation, 2 for a usage error.
const (
	zfsFailed = 1
	zfsUsage  = 2
)

const zfsDeniedMsg = "Permission denied the ZFS utilities must be run as root.\n"

// maxVolblocksize is the largest zvol block size with large_blocks enabled.
const maxVolblocksize = 16 * mib

// nativeProps are the ZFS properties the simulator knows, with their default
// values; volume-only ones apply to zvols alone.
var nativeProps = map[string]string{
	"compression":        "on",
	"checksum":           "on",
	"copies":             "1",
	"dedup":              "off",
	"sync":               "standard",
	"logbias":            "latency",
	"primarycache":       "all",
	"secondarycache":     "all",
	"readonly":           "off",
	"redundant_metadata": "all",
	"volmode":            "default",
	"snapdev":            "hidden",
}

var volumeOnlyProps = map[string]bool{"volsize": true, "volblocksize": true, "volmode": true, "snapdev": true}

// propEnums lists the accepted values of the enumerated properties the
// simulator checks.
var propEnums = map[string][]string{
	"compression": {"on", "off", "lzjb", "gzip", "gzip-1", "gzip-2", "gzip-3", "gzip-4", "gzip-5", "gzip-6", "gzip-7", "gzip-8", "gzip-9", "zle", "lz4", "zstd", "zstd-fast"},
	"checksum":    {"on", "off", "fletcher2", "fletcher4", "sha256", "noparity", "sha512", "skein", "edonr", "blake3"},
	"copies":      {"1", "2", "3"},
	"dedup":       {"on", "off", "verify", "sha256", "sha256,verify", "sha512", "skein", "edonr", "blake3"},
	"sync":        {"standard", "always", "disabled"},
	"logbias":     {"latency", "throughput"},
	"readonly":    {"on", "off"},
	"volmode":     {"default", "full", "geom", "dev", "none"},
	"snapdev":     {"hidden", "visible"},
}

var zfsComponentRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

func checkDatasetComponent(c string) error {
	if !zfsComponentRE.MatchString(c) {
		return fmt.Errorf("invalid character in name")
	}
	return nil
}

func validDatasetName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return false
	}
	for _, c := range strings.Split(name, "/") {
		if checkDatasetComponent(c) != nil {
			return false
		}
	}
	return true
}

func poolOf(ds string) string {
	p, _, _ := strings.Cut(ds, "/")
	return p
}

func parentOf(ds string) string {
	i := strings.LastIndexByte(ds, '/')
	if i < 0 {
		return ""
	}
	return ds[:i]
}

func isDescendant(ds, of string) bool { return strings.HasPrefix(ds, of+"/") }

func depthBelow(ds, of string) int {
	// A snapshot is one level below its dataset.
	return strings.Count(ds, "/") - strings.Count(of, "/") + strings.Count(ds, "@")
}

// lessDataset orders datasets as zfs list walks them: parents first, then
// children by name.
func lessDataset(a, b string) bool {
	ac, bc := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(ac) && i < len(bc); i++ {
		if ac[i] != bc[i] {
			return ac[i] < bc[i]
		}
	}
	return len(ac) < len(bc)
}

// zvolReservation is the refreservation `zfs create -V` sets on a thick
// zvol: the data blocks plus room for the indirect blocks that map them,
// as OpenZFS estimates it for a pool of plain (non-raidz) vdevs.
func zvolReservation(volsize, volblocksize int64, copies int) int64 {
	const dnodesPerLevel = 1024 // 128K indirect blocks of 128-byte block pointers
	nblocks := volsize / volblocksize
	numdb := int64(7)
	for nblocks > 1 {
		nblocks = (nblocks + dnodesPerLevel - 1) / dnodesPerLevel
		numdb += nblocks
	}
	numdb *= int64(min(3, copies+1))
	return volsize*int64(copies) + numdb*(128*kib)
}

// slop is the space ZFS keeps back from datasets: 1/32 of the pool,
// clamped to [128 MiB, 128 GiB] and to half the pool.
func slop(size int64) int64 {
	s := size / 32
	s = max(s, 128*mib)
	s = min(s, 128*gib)
	return min(s, size/2)
}

// copiesOf is a dataset's effective copies property.
func (t *tool) copiesOf(ds string) int {
	n, err := strconv.Atoi(t.prop(ds, "copies"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// referenced is how much data a dataset holds: for a zvol, what has been
// written to its backing file.
func (t *tool) referenced(ds string) int64 {
	d := t.st.Datasets[ds]
	if d == nil || d.Type != typeVolume {
		return 0
	}
	return min(allocatedBytes(t.host.zvolPath(ds)), d.Volsize) * int64(t.copiesOf(ds))
}

// charged is the space a dataset itself takes from the pool.
func (t *tool) charged(ds string) int64 {
	d := t.st.Datasets[ds]
	if d == nil || d.Type != typeVolume {
		return 0
	}
	return max(d.Refreservation, t.referenced(ds))
}

func (t *tool) used(ds string) int64 {
	n := t.charged(ds)
	for other := range t.st.Datasets {
		if isDescendant(other, ds) {
			n += t.charged(other)
		}
	}
	return n
}

// avail is what any dataset of a pool may still use (no quotas simulated).
func (t *tool) avail(pool string) int64 {
	p := t.st.Pools[pool]
	if p == nil {
		return 0
	}
	return max(0, p.Size-slop(p.Size)-t.used(pool))
}

// prop is a property's effective value, following inheritance for
// inheritable properties and user properties.
func (t *tool) prop(ds, name string) string {
	for cur := ds; cur != ""; cur = parentOf(cur) {
		d := t.st.Datasets[cur]
		if d == nil {
			break
		}
		if v, ok := d.Props[name]; ok {
			return v
		}
		if volumeOnlyProps[name] {
			break
		}
	}
	if v, ok := nativeProps[name]; ok {
		return v
	}
	return "-"
}

// poolSuspended reports whether a pool's I/O is unavailable.
func (t *tool) poolSuspended(pool string) bool {
	p := t.st.Pools[pool]
	return p != nil && (p.Health == HealthFaulted || p.Health == HealthUnavail || p.Health == HealthSuspended)
}

func (t *tool) zfs(args []string) int {
	if t.st.DevicesDenied {
		t.errorf(zfsDeniedMsg)
		return zfsFailed
	}
	if len(args) == 0 {
		t.errorf("usage: zfs command args ...\n")
		return zfsUsage
	}
	switch args[0] {
	case "create":
		return t.zfsCreate(args[1:])
	case "destroy":
		return t.zfsDestroy(args[1:])
	case "list":
		return t.zfsList(args[1:])
	case "set":
		return t.zfsSet(args[1:])
	case "snapshot", "snap":
		return t.zfsSnapshot(args[1:])
	case "clone":
		return t.zfsClone(args[1:])
	default:
		t.errorf("unrecognized command '%s'\n", args[0])
		return zfsUsage
	}
}

// checkPropValue validates a property assignment for a dataset type and
// returns the message zfs prints after "cannot create 'x': ".
func checkPropValue(name, value, dsType string) string {
	if strings.Contains(name, ":") {
		return "" // user property
	}
	switch name {
	case "volsize", "volblocksize", "refreservation", "reservation":
	default:
		if _, ok := nativeProps[name]; !ok {
			return fmt.Sprintf("invalid property '%s'", name)
		}
	}
	if volumeOnlyProps[name] && dsType != typeVolume {
		return fmt.Sprintf("'%s' does not apply to datasets of this type", name)
	}
	if enum, ok := propEnums[name]; ok {
		for _, v := range enum {
			if v == value {
				return ""
			}
		}
		if name == "compression" && (strings.HasPrefix(value, "zstd-") || strings.HasPrefix(value, "zstd-fast-")) {
			return ""
		}
		return fmt.Sprintf("'%s' must be one of '%s'", name, strings.Join(enum, " | "))
	}
	switch name {
	case "volblocksize":
		n, err := zfsParseNum(value)
		if err != nil || n < 512 || n > maxVolblocksize || n&(n-1) != 0 {
			return fmt.Sprintf("'%s' must be power of 2 from 512B to %s", name, zfsNicenum(maxVolblocksize))
		}
	case "refreservation", "reservation":
		if value != "none" && value != "auto" {
			if _, err := zfsParseNum(value); err != nil {
				return fmt.Sprintf("bad numeric value '%s'", value)
			}
		}
	}
	return ""
}

func (t *tool) zfsCreate(args []string) int {
	opts, pos, err := parseOpts(args, []option{
		{name: "p", short: 'p'}, {name: "s", short: 's'}, {name: "u", short: 'u'},
		{name: "V", short: 'V', arg: true}, {name: "b", short: 'b', arg: true}, {name: "o", short: 'o', arg: true},
	})
	if err != nil {
		t.errorf("%v\nusage:\n\tcreate [-Pnpuv] [-o property=value] ... <filesystem>\n\tcreate [-Pnpsv] [-b blocksize] [-o property=value] ... -V <size> <volume>\n", err)
		return zfsUsage
	}
	if len(pos) == 0 {
		t.errorf("missing %s argument\n", "filesystem")
		return zfsUsage
	}
	if len(pos) > 1 {
		t.errorf("too many arguments\n")
		return zfsUsage
	}
	name := pos[0]
	isVol := opts.has("V")
	if !isVol && (opts.has("s") || opts.has("b")) {
		t.errorf("'-s' and '-b' can only be used when creating a volume\n")
		return zfsUsage
	}
	props := map[string]string{}
	setProp := func(kv string) bool {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.errorf("missing '=' for property=value argument\n")
			return false
		}
		if _, dup := props[k]; dup {
			t.errorf("property '%s' specified multiple times\n", k)
			return false
		}
		props[k] = v
		return true
	}
	if opts.has("b") && !setProp("volblocksize="+opts.last("b")) {
		return zfsUsage
	}
	for _, kv := range opts["o"] {
		if !setProp(kv) {
			return zfsUsage
		}
	}
	var volsize int64
	if isVol {
		volsize, err = zfsParseNum(opts.last("V"))
		if err != nil {
			t.errorf("bad volume size '%s': %v\n", opts.last("V"), err)
			return zfsFailed
		}
	}
	fail := func(format string, args ...any) int {
		t.errorf("cannot create '%s': %s\n", name, fmt.Sprintf(format, args...))
		return zfsFailed
	}
	if !validDatasetName(name) {
		return fail("invalid character in name")
	}
	if !strings.Contains(name, "/") {
		return fail("missing dataset name")
	}
	pool := poolOf(name)
	if _, ok := t.st.Pools[pool]; !ok {
		return fail("no such pool '%s'", pool)
	}
	if t.poolSuspended(pool) {
		return fail("pool I/O is currently suspended")
	}
	parent := parentOf(name)
	if pd, ok := t.st.Datasets[parent]; !ok {
		if !opts.has("p") {
			return fail("parent does not exist")
		}
	} else if pd.Type != typeFilesystem {
		return fail("parent is not a filesystem")
	}
	if _, ok := t.st.Datasets[name]; ok {
		if opts.has("p") {
			return 0 // with -p an existing dataset is not an error
		}
		return fail("dataset already exists")
	}
	dsType := typeFilesystem
	if isVol {
		dsType = typeVolume
	}
	for _, k := range sortedKeys(props) {
		if msg := checkPropValue(k, props[k], dsType); msg != "" {
			return fail("%s", msg)
		}
		if k == "volsize" {
			return fail("property 'volsize' specified multiple times")
		}
	}
	d := &dataset{Type: dsType, GUID: randomGUID(), Props: map[string]string{}}
	if isVol {
		d.Volblocksize = DefaultVolblocksize
		if v, ok := props["volblocksize"]; ok {
			d.Volblocksize, _ = zfsParseNum(v)
		}
		if volsize == 0 {
			return fail("volume size cannot be zero")
		}
		// zfs create rounds the size up to the block size by itself.
		d.Volsize = roundUp(volsize, d.Volblocksize)
		copies := 1
		if v, ok := props["copies"]; ok {
			copies, _ = strconv.Atoi(v)
		}
		switch v, ok := props["refreservation"]; {
		case ok && v == "none":
		case ok && v != "auto":
			d.Refreservation, _ = zfsParseNum(v)
		case ok || !opts.has("s"):
			d.Refreservation = zvolReservation(d.Volsize, d.Volblocksize, copies)
		}
		if d.Refreservation > t.avail(pool) {
			return fail("out of space")
		}
	}
	for k, v := range props {
		switch k {
		case "volblocksize", "refreservation":
		default:
			d.Props[k] = v
		}
	}
	// Create missing parents (-p) only once nothing can fail any more.
	var created []string
	for cur := parent; cur != pool; cur = parentOf(cur) {
		if _, ok := t.st.Datasets[cur]; ok {
			break
		}
		created = append(created, cur)
	}
	if isVol {
		if err := createBacking(t.host.zvolPath(name), d.Volsize); err != nil {
			return fail("%v", err)
		}
	}
	for _, c := range created {
		t.st.Datasets[c] = &dataset{Type: typeFilesystem, GUID: randomGUID()}
	}
	t.st.Datasets[name] = d
	return 0
}

func (t *tool) zfsDestroy(args []string) int {
	opts, pos, err := parseOpts(args, []option{
		{name: "d", short: 'd'}, {name: "f", short: 'f'}, {name: "r", short: 'r'}, {name: "R", short: 'R'}, {name: "v", short: 'v'},
	})
	if err != nil || len(pos) != 1 {
		if err == nil {
			err = fmt.Errorf("missing dataset argument")
		}
		t.errorf("%v\nusage:\n\tdestroy [-fnpRrv] <filesystem|volume>\n", err)
		return zfsUsage
	}
	name := pos[0]
	if strings.Contains(name, "#") || (strings.Contains(name, "@") && (opts.has("r") || opts.has("R"))) {
		t.errorf("fakestorage: destroying bookmarks, or snapshots recursively, is not simulated\n")
		return zfsUsage
	}
	if strings.Contains(name, "@") {
		return t.zfsDestroySnapshot(name, opts.has("d"))
	}
	if opts.has("d") {
		t.errorf("fakestorage: destroy -d of a filesystem or volume is not simulated\n")
		return zfsUsage
	}
	if _, ok := t.st.Datasets[name]; !ok {
		t.errorf("cannot open '%s': dataset does not exist\n", name)
		return zfsFailed
	}
	if t.poolSuspended(poolOf(name)) {
		t.errorf("cannot open '%s': pool I/O is currently suspended\n", name)
		return zfsFailed
	}
	recursive := opts.has("r") || opts.has("R")
	if !strings.Contains(name, "/") && !recursive {
		t.errorf("cannot destroy '%s': operation does not apply to pools\nuse 'zfs destroy -r %s' to destroy all datasets in the pool\nuse 'zpool destroy %s' to destroy the pool itself\n", name, name, name)
		return zfsFailed
	}
	var children []string
	for ds := range t.st.Datasets {
		if isDescendant(ds, name) || strings.HasPrefix(ds, name+"@") {
			children = append(children, ds)
		}
	}
	sort.Slice(children, func(i, j int) bool { return lessDataset(children[i], children[j]) })
	if len(children) > 0 && !recursive {
		t.errorf("cannot destroy '%s': %s has children\nuse '-r' to destroy the following datasets:\n%s\n", name, t.st.Datasets[name].Type, strings.Join(children, "\n"))
		return zfsFailed
	}
	for _, ds := range children {
		if clones := t.clonesOf(ds); len(clones) > 0 && t.st.Datasets[ds].Type == typeSnapshot && !opts.has("R") {
			t.errorf("cannot destroy '%s': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n%s\n", ds, strings.Join(clones, "\n"))
			return zfsFailed
		}
	}
	victims := children
	if strings.Contains(name, "/") {
		victims = append(victims, name)
	}
	for _, ds := range victims {
		t.removeDataset(ds)
	}
	return 0
}

func (t *tool) zfsSet(args []string) int {
	_, pos, err := parseOpts(args, nil)
	if err != nil || len(pos) < 2 {
		if err == nil {
			err = fmt.Errorf("missing arguments")
		}
		t.errorf("%v\nusage:\n\tset <property=value> ... <filesystem|volume|snapshot> ...\n", err)
		return zfsUsage
	}
	kv, targets := pos[0], pos[1:]
	prop, value, ok := strings.Cut(kv, "=")
	if !ok {
		t.errorf("missing '=' for property=value argument\n")
		return zfsUsage
	}
	code := 0
	for _, ds := range targets {
		if c := t.zfsSetOne(ds, prop, value); c != 0 {
			code = c
		}
	}
	return code
}

func (t *tool) zfsSetOne(ds, prop, value string) int {
	d, ok := t.st.Datasets[ds]
	if !ok {
		t.errorf("cannot open '%s': dataset does not exist\n", ds)
		return zfsFailed
	}
	if t.poolSuspended(poolOf(ds)) {
		t.errorf("cannot open '%s': pool I/O is currently suspended\n", ds)
		return zfsFailed
	}
	fail := func(format string, args ...any) int {
		t.errorf("cannot set property for '%s': %s\n", ds, fmt.Sprintf(format, args...))
		return zfsFailed
	}
	if msg := checkPropValue(prop, value, d.Type); msg != "" {
		return fail("%s", msg)
	}
	switch prop {
	case "volblocksize":
		return fail("'volblocksize' is readonly")
	case "volsize":
		n, err := zfsParseNum(value)
		if err != nil {
			return fail("bad numeric value '%s'", value)
		}
		if n == 0 {
			return fail("'volsize' cannot be zero")
		}
		if n%d.Volblocksize != 0 {
			return fail("'volsize' must be a multiple of volume block size (%s)", zfsNicenum(d.Volblocksize))
		}
		// A refreservation that tracks the size (the thick default) moves
		// with it; the growth must fit in the pool. Shrinking is allowed,
		// as in ZFS.
		newResv := d.Refreservation
		copies := t.copiesOf(ds)
		if d.Refreservation == zvolReservation(d.Volsize, d.Volblocksize, copies) {
			newResv = zvolReservation(n, d.Volblocksize, copies)
		}
		if grow := newResv - max(d.Refreservation, t.referenced(ds)); grow > 0 && grow > t.avail(poolOf(ds)) {
			return fail("out of space")
		}
		if err := resizeBacking(t.host.zvolPath(ds), n); err != nil {
			return fail("%v", err)
		}
		d.Volsize, d.Refreservation = n, newResv
	case "refreservation":
		var n int64
		switch value {
		case "none":
		case "auto":
			n = zvolReservation(d.Volsize, d.Volblocksize, t.copiesOf(ds))
		default:
			n, _ = zfsParseNum(value)
		}
		if n-t.charged(ds) > t.avail(poolOf(ds)) {
			return fail("size is greater than available space")
		}
		d.Refreservation = n
	case "reservation":
		if value != "none" && value != "0" {
			return fail("fakestorage: reservation is not simulated")
		}
	default:
		if d.Props == nil {
			d.Props = map[string]string{}
		}
		d.Props[prop] = value
	}
	return 0
}

var zfsListColumns = map[string]string{
	"name": "NAME", "type": "TYPE", "used": "USED", "available": "AVAIL", "avail": "AVAIL",
	"referenced": "REFER", "refer": "REFER", "volsize": "VOLSIZE", "volblocksize": "VOLBLOCK",
	"refreservation": "REFRESERV", "refreserv": "REFRESERV", "reservation": "RESERV", "reserv": "RESERV",
	"mountpoint": "MOUNTPOINT", "guid": "GUID", "origin": "ORIGIN", "creation": "CREATION",
	"defer_destroy": "DEFER_DESTROY",
}

func (t *tool) zfsList(args []string) int {
	opts, pos, err := parseOpts(args, []option{
		{name: "H", short: 'H'}, {name: "p", short: 'p'}, {name: "r", short: 'r'},
		{name: "d", short: 'd', arg: true}, {name: "t", short: 't', arg: true}, {name: "o", short: 'o', arg: true},
		{name: "s", short: 's', arg: true}, {name: "S", short: 'S', arg: true},
	})
	usage := "usage:\n\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]...\n\t    [-S property]... [-t type[,...]] [filesystem|volume|snapshot] ...\n"
	if err != nil {
		t.errorf("%v\n%s", err, usage)
		return zfsUsage
	}
	if opts.has("s") || opts.has("S") {
		t.errorf("fakestorage: zfs list -s/-S is not simulated\n")
		return zfsUsage
	}
	depth := -1 // unlimited
	recurse := opts.has("r") || len(pos) == 0
	if opts.has("d") {
		n, err := strconv.Atoi(opts.last("d"))
		if err != nil || n < 0 {
			t.errorf("invalid depth '%s'\n%s", opts.last("d"), usage)
			return zfsUsage
		}
		depth, recurse = n, true
	}
	types := map[string]bool{typeFilesystem: true, typeVolume: true}
	if opts.has("t") {
		types = map[string]bool{}
		for _, ty := range strings.Split(opts.last("t"), ",") {
			switch ty {
			case "filesystem", "fs":
				types[typeFilesystem] = true
			case "volume", "vol":
				types[typeVolume] = true
			case "snapshot", "snap":
				types[typeSnapshot] = true
			case "bookmark":
				// none are simulated
			case "all":
				types[typeFilesystem], types[typeVolume], types[typeSnapshot] = true, true, true
			default:
				t.errorf("invalid type '%s'\n%s", ty, usage)
				return zfsUsage
			}
		}
	}
	cols := []string{"name", "used", "avail", "refer", "mountpoint"}
	if opts.has("o") {
		cols = nil
		for _, o := range opts["o"] {
			cols = append(cols, strings.Split(o, ",")...)
		}
	}
	for _, c := range cols {
		_, known := zfsListColumns[c]
		_, native := nativeProps[c]
		if !known && !native && !strings.Contains(c, ":") {
			t.errorf("bad property list: invalid property '%s'\n%s", c, usage)
			return zfsUsage
		}
	}

	code := 0
	selected := map[string]bool{}
	roots := pos
	if len(pos) == 0 {
		roots = nil
		for p := range t.st.Pools {
			if !t.poolSuspended(p) {
				roots = append(roots, p)
			}
		}
	}
	for _, root := range roots {
		if _, ok := t.st.Datasets[root]; !ok {
			t.errorf("cannot open '%s': dataset does not exist\n", root)
			code = zfsFailed
			continue
		}
		if t.poolSuspended(poolOf(root)) {
			t.errorf("cannot open '%s': pool I/O is currently suspended\n", root)
			code = zfsFailed
			continue
		}
		selected[root] = true
		if !recurse {
			continue
		}
		for ds := range t.st.Datasets {
			if isDescendant(ds, root) && (depth < 0 || depthBelow(ds, root) <= depth) {
				selected[ds] = true
			}
		}
	}
	var names []string
	for ds := range selected {
		if types[t.st.Datasets[ds].Type] {
			names = append(names, ds)
		}
	}
	sort.Slice(names, func(i, j int) bool { return lessDataset(names[i], names[j]) })

	rows := [][]string{}
	for _, ds := range names {
		row := make([]string, len(cols))
		for i, c := range cols {
			row[i] = t.zfsListValue(ds, c, opts.has("p"))
		}
		rows = append(rows, row)
	}
	if opts.has("H") {
		for _, r := range rows {
			t.printf("%s\n", strings.Join(r, "\t"))
		}
		return code
	}
	if len(rows) == 0 {
		if code == 0 {
			t.errorf("no datasets available\n")
		}
		return code
	}
	header := make([]string, len(cols))
	for i, c := range cols {
		if h, ok := zfsListColumns[c]; ok {
			header[i] = h
		} else {
			header[i] = strings.ToUpper(c)
		}
	}
	writeTable(t.out, header, rows, "  ", false)
	return code
}

func (t *tool) zfsListValue(ds, col string, parsable bool) string {
	d := t.st.Datasets[ds]
	num := func(n int64) string {
		if parsable {
			return strconv.FormatInt(n, 10)
		}
		return zfsNicenum(n)
	}
	switch col {
	case "name":
		return ds
	case "type":
		return d.Type
	case "used":
		return num(t.used(ds))
	case "available", "avail":
		return num(t.avail(poolOf(ds)))
	case "referenced", "refer":
		return num(t.referenced(ds))
	case "volsize":
		if d.Type != typeVolume && (d.Type != typeSnapshot || d.Volsize == 0) {
			return "-"
		}
		return num(d.Volsize)
	case "origin":
		if d.Origin == "" {
			return "-"
		}
		return d.Origin
	case "creation":
		if parsable {
			return strconv.FormatInt(d.Creation, 10)
		}
		return time.Unix(d.Creation, 0).Format("Mon Jan _2 15:04 2006")
	case "volblocksize":
		if d.Type != typeVolume {
			return "-"
		}
		return num(d.Volblocksize)
	case "refreservation", "refreserv":
		if d.Refreservation == 0 && !parsable {
			return "none"
		}
		return num(d.Refreservation)
	case "reservation", "reserv":
		if parsable {
			return "0"
		}
		return "none"
	case "mountpoint":
		if d.Type != typeFilesystem {
			return "-"
		}
		return "/" + ds
	case "guid":
		return strconv.FormatUint(d.GUID, 10)
	case "defer_destroy":
		switch {
		case d.Type != typeSnapshot:
			return "-"
		case d.DeferDestroy:
			return "on"
		}
		return "off"
	}
	if volumeOnlyProps[col] && d.Type != typeVolume {
		return "-"
	}
	return t.prop(ds, col)
}

func (t *tool) zpool(args []string) int {
	if t.st.DevicesDenied {
		t.errorf(zfsDeniedMsg)
		return zfsFailed
	}
	if len(args) == 0 || args[0] != "list" {
		if len(args) == 0 {
			t.errorf("usage: zpool command args ...\n")
		} else {
			t.errorf("fakestorage: zpool %s is not simulated\n", args[0])
		}
		return zfsUsage
	}
	opts, pos, err := parseOpts(args[1:], []option{
		{name: "H", short: 'H'}, {name: "p", short: 'p'}, {name: "o", short: 'o', arg: true},
	})
	if err != nil {
		t.errorf("%v\nusage:\n\tlist [-HgLpPv] [-o property[,...]] [-T d|u] [pool] ... [interval [count]]\n", err)
		return zfsUsage
	}
	cols := []string{"name", "size", "alloc", "free", "ckpoint", "expandsz", "frag", "cap", "dedup", "health", "altroot"}
	if opts.has("o") {
		cols = nil
		for _, o := range opts["o"] {
			cols = append(cols, strings.Split(o, ",")...)
		}
	}
	headers := map[string]string{
		"name": "NAME", "size": "SIZE", "allocated": "ALLOC", "alloc": "ALLOC", "free": "FREE",
		"checkpoint": "CKPOINT", "ckpoint": "CKPOINT", "expandsize": "EXPANDSZ", "expandsz": "EXPANDSZ",
		"fragmentation": "FRAG", "frag": "FRAG", "capacity": "CAP", "cap": "CAP",
		"dedupratio": "DEDUP", "dedup": "DEDUP", "health": "HEALTH", "altroot": "ALTROOT", "guid": "GUID",
	}
	for _, c := range cols {
		if _, ok := headers[c]; !ok {
			t.errorf("property '%s' is not a valid pool or vdev property\n", c)
			return zfsUsage
		}
	}
	code := 0
	names := pos
	if len(pos) == 0 {
		names = sortedKeys(t.st.Pools)
		if len(names) == 0 {
			t.printf("no pools available\n")
			return 0
		}
	}
	var rows [][]string
	for _, name := range names {
		p, ok := t.st.Pools[name]
		if !ok {
			t.errorf("cannot open '%s': no such pool\n", name)
			code = zfsFailed
			continue
		}
		var alloc int64
		for ds := range t.st.Datasets {
			if poolOf(ds) == name {
				alloc += t.referenced(ds)
			}
		}
		num := func(n int64) string {
			if opts.has("p") {
				return strconv.FormatInt(n, 10)
			}
			return zfsNicenum(n)
		}
		pct := func(n int64) string {
			if opts.has("p") {
				return strconv.FormatInt(n, 10)
			}
			return strconv.FormatInt(n, 10) + "%"
		}
		row := make([]string, len(cols))
		for i, c := range cols {
			switch c {
			case "name":
				row[i] = name
			case "size":
				row[i] = num(p.Size)
			case "allocated", "alloc":
				row[i] = num(alloc)
			case "free":
				row[i] = num(p.Size - alloc)
			case "capacity", "cap":
				row[i] = pct(alloc * 100 / p.Size)
			case "fragmentation", "frag":
				row[i] = pct(0)
			case "dedupratio", "dedup":
				if opts.has("p") {
					row[i] = "1.00"
				} else {
					row[i] = "1.00x"
				}
			case "health":
				row[i] = p.Health
			case "guid":
				row[i] = strconv.FormatUint(p.GUID, 10)
			default:
				row[i] = "-"
			}
		}
		rows = append(rows, row)
	}
	if opts.has("H") {
		for _, r := range rows {
			t.printf("%s\n", strings.Join(r, "\t"))
		}
		return code
	}
	if len(rows) > 0 {
		header := make([]string, len(cols))
		for i, c := range cols {
			header[i] = headers[c]
		}
		writeTable(t.out, header, rows, "  ", false)
	}
	return code
}

// writeTable prints left-aligned columns under a header, as the tools do
// without -H / --noheadings; padLast pads the last column too, as LVM does.
func writeTable(w interface{ Write([]byte) (int, error) }, header []string, rows [][]string, sep string, padLast bool) {
	cols := len(header)
	if cols == 0 && len(rows) > 0 {
		cols = len(rows[0])
	}
	widths := make([]int, cols)
	for i, h := range header {
		widths[i] = len(h)
	}
	for _, r := range rows {
		for i, v := range r {
			widths[i] = max(widths[i], len(v))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString(sep)
			}
			if i == len(cells)-1 && !padLast {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s", widths[i], c)
			}
		}
		b.WriteByte('\n')
		_, _ = w.Write([]byte(b.String()))
	}
	if header != nil {
		line(header)
	}
	for _, r := range rows {
		line(r)
	}
}
