package storagetools

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// ParseSize reads a size the way the admin commands take it: a byte count
// with an optional binary suffix (K, M, G, T, P; an optional trailing B or
// "iB" is ignored), e.g. "1073741824", "512M", "1.5G", "4MiB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	for _, suf := range []string{"iB", "ib", "B", "b"} {
		if len(t) > len(suf) && strings.HasSuffix(t, suf) {
			t = t[:len(t)-len(suf)]
			break
		}
	}
	mult := int64(1)
	if t != "" && isUnit(t[len(t)-1]) {
		mult = unitBytes(t[len(t)-1])
		t = t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	n := v * float64(mult)
	if n >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(n), nil
}

func isUnit(c byte) bool {
	return strings.IndexByte("kKmMgGtTpPeE", c) >= 0
}

func unitBytes(c byte) int64 {
	switch c {
	case 'k', 'K':
		return kib
	case 'm', 'M':
		return mib
	case 'g', 'G':
		return gib
	case 't', 'T':
		return gib << 10
	case 'p', 'P':
		return gib << 20
	case 'e', 'E':
		return gib << 30
	}
	return 1
}

// zfsParseNum reads a size as zfs(8) takes it: digits with an optional
// single-letter binary suffix, optionally followed by "B" ("16K", "1G",
// "1.5GB", "4096").
func zfsParseNum(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("bad numeric value ''")
	}
	t := s
	mult := int64(1)
	if last := t[len(t)-1]; last == 'B' || last == 'b' {
		if len(t) >= 2 && isUnit(t[len(t)-2]) {
			t = t[:len(t)-1]
		} else if len(t) >= 2 && (t[len(t)-2] >= '0' && t[len(t)-2] <= '9') {
			t = t[:len(t)-1]
		}
	}
	if isUnit(t[len(t)-1]) {
		mult = unitBytes(t[len(t)-1])
		t = t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("invalid numeric suffix")
	}
	if mult == 1 && strings.Contains(t, ".") {
		return 0, fmt.Errorf("invalid numeric suffix")
	}
	return int64(v * float64(mult)), nil
}

// zfsNicenum formats bytes like zfs(8) without -p: the largest binary unit
// ("B" below 1K), no decimals for exact multiples, otherwise as many
// decimals (2, 1, 0) as fit in five characters.
func zfsNicenum(n int64) string {
	units := []string{"B", "K", "M", "G", "T", "P", "E"}
	i := 0
	for v := n; v >= 1024 && i < len(units)-1; v /= 1024 {
		i++
	}
	div := int64(1) << (10 * i)
	if i == 0 || n%div == 0 {
		return fmt.Sprintf("%d%s", n/div, units[i])
	}
	val := float64(n) / float64(div)
	var s string
	for prec := 2; prec >= 0; prec-- {
		s = fmt.Sprintf("%.*f%s", prec, val, units[i])
		if len(s) <= 5 {
			break
		}
	}
	return s
}

// lvmParseSize reads an LVM size argument (-L, -V): an optional sign, a
// number, and a unit among b (bytes, which must be a multiple of 512), s
// (512-byte sectors) and k m g t p e (binary, either case); no unit means
// defaultUnit. It returns bytes.
func lvmParseSize(arg string, defaultUnit byte) (bytes int64, sign byte, msg string) {
	v := arg
	if v != "" && (v[0] == '+' || v[0] == '-') {
		sign, v = v[0], v[1:]
	}
	if v != "" && (v[0] == '+' || v[0] == '-') {
		return 0, 0, "Multiple sign symbols detected."
	}
	if v == "" || !(v[0] >= '0' && v[0] <= '9' || v[0] == '.') {
		return 0, 0, "Size requires number argument."
	}
	end := 0
	for end < len(v) && (v[end] >= '0' && v[end] <= '9' || v[end] == '.') {
		end++
	}
	num, err := strconv.ParseFloat(v[:end], 64)
	if err != nil {
		return 0, 0, fmt.Sprintf("Can't parse size argument at '%s'.", v[end:])
	}
	unit := defaultUnit
	switch rest := v[end:]; len(rest) {
	case 0:
	case 1:
		unit = rest[0]
	default:
		return 0, 0, "Can't parse size argument."
	}
	switch unit {
	case 'b', 'B':
		n := int64(num)
		if rem := n % 512; rem != 0 {
			up := n + 512 - rem
			return 0, 0, fmt.Sprintf("Size is not a multiple of 512. Try using %d or %d.", up-512, up)
		}
		return n, sign, ""
	case 's', 'S':
		return int64(num * 512), sign, ""
	}
	if !isUnit(unit) {
		return 0, 0, "Can't parse size argument."
	}
	// LVM keeps sizes in sectors, so sub-sector fractions are dropped.
	sectors := int64(num * float64(unitBytes(unit)) / 512)
	return sectors * 512, sign, ""
}

// lvmDisplaySize formats like LVM's messages ("4.00 MiB", "1.00 GiB").
func lvmDisplaySize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for v := n; v >= 1024 && i < len(units)-1; v /= 1024 {
		i++
	}
	return fmt.Sprintf("%.2f %s", float64(n)/float64(int64(1)<<(10*i)), units[i])
}

// lvmReportSize formats a size for lvs/vgs columns in the given --units:
// 'b' exact bytes, 'h' (the default) the largest fitting unit with two
// decimals and a "<" when the shown value was rounded up, or a fixed
// k/m/g/t unit.
func lvmReportSize(n int64, units byte, suffix bool) string {
	switch units {
	case 'b', 'B':
		if suffix {
			return strconv.FormatInt(n, 10) + "B"
		}
		return strconv.FormatInt(n, 10)
	case 's', 'S':
		if suffix {
			return strconv.FormatInt(n/512, 10) + "S"
		}
		return strconv.FormatInt(n/512, 10)
	}
	unit := units
	if units == 'h' || units == 'H' {
		unit = 'b'
		for _, u := range []byte("kmgtpe") {
			if n >= unitBytes(u) {
				unit = u
			}
		}
		if unit == 'b' {
			return lvmReportSize(n, 'b', suffix)
		}
	}
	div := unitBytes(unit)
	val := float64(n) / float64(div)
	s := fmt.Sprintf("%.2f", val)
	prefix := ""
	// Like LVM's "r" units: a value rounded up for display gets a "<".
	if hundredths := val * 100; math.Floor(hundredths) != math.Round(hundredths) {
		prefix = "<"
	}
	if suffix {
		s += strings.ToLower(string(unit))
	}
	return prefix + s
}
