package storagetools

import (
	"fmt"
	"strings"
)

// option describes one command-line option; name is the key it is stored
// under, short and long are its spellings ("" when it has none).
type option struct {
	name  string
	short byte
	long  string
	arg   bool
}

// parsedOpts holds the values of each option in order of appearance; boolean
// options store "".
type parsedOpts map[string][]string

func (p parsedOpts) has(name string) bool { return len(p[name]) > 0 }

// last returns the last value of an option, as getopt-based tools do when an
// option is repeated.
func (p parsedOpts) last(name string) string {
	v := p[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseOpts reads options like getopt_long with argument permutation (both
// zfs and the LVM tools accept options after operands): combined short
// flags ("-Hp"), attached values ("-ovalue", "--name=value"), and "--" to end
// options.
func parseOpts(args []string, spec []option) (parsedOpts, []string, error) {
	opts := parsedOpts{}
	var pos []string
	find := func(short byte, long string) *option {
		for i := range spec {
			if (short != 0 && spec[i].short == short) || (long != "" && spec[i].long == long) {
				return &spec[i]
			}
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			return opts, pos, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o := find(0, name)
			if o == nil {
				return nil, nil, fmt.Errorf("unrecognized option '--%s'", name)
			}
			if !o.arg {
				if hasVal {
					return nil, nil, fmt.Errorf("option '--%s' doesn't allow an argument", name)
				}
				opts[o.name] = append(opts[o.name], "")
				continue
			}
			if !hasVal {
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("option '--%s' requires an argument", name)
				}
				i++
				val = args[i]
			}
			opts[o.name] = append(opts[o.name], val)
		case len(a) > 1 && a[0] == '-' && !isNumberArg(a):
			for j := 1; j < len(a); j++ {
				o := find(a[j], "")
				if o == nil {
					return nil, nil, fmt.Errorf("invalid option '%c'", a[j])
				}
				if !o.arg {
					opts[o.name] = append(opts[o.name], "")
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("missing argument for '%c' option", a[j])
					}
					i++
					val = args[i]
				}
				opts[o.name] = append(opts[o.name], val)
				break
			}
		default:
			pos = append(pos, a)
		}
	}
	return opts, pos, nil
}

// isNumberArg keeps negative numbers from being read as option clusters.
func isNumberArg(a string) bool {
	return len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9'
}
