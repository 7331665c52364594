package server

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// setting declares one start-up setting, once: the Config field it lands
// in (whose yaml tag is its file key), its default, its flag and
// environment variable, and the sentence --help and docs/configuration.md
// show. The file is decoded onto the defaults, the environment over it,
// then the flags are parsed onto the same fields, so the last source to
// name a setting wins without tracking which flags were set.
type setting struct {
	field any    // pointer to a Config field
	flag  string // "" when only the file sets it
	env   string // read after the file, before the flags
	usage string
	reset func() // stores the default in the field
	// each parses one occurrence of a repeatable flag that adds to a list
	// or map (the file's entries stay).
	each func(string) error
	// shown is the default docs print when the zero value stands for one
	// chosen where the setting is used.
	shown string
}

// opt declares a setting of type T with its default; flag may be empty.
func opt[T any](p *T, def T, flag, usage string) setting {
	return setting{field: p, flag: flag, usage: usage, reset: func() { *p = def }}
}

// withEnv names the environment variable that sets it between the file
// and the flag.
func (s setting) withEnv(name string) setting { s.env = name; return s }

// showing names the default the zero value stands for.
func (s setting) showing(d string) setting { s.shown = d; return s }

// repeat makes the flag repeatable, each occurrence parsed by each.
func (s setting) repeat(each func(string) error) setting { s.each = each; return s }

// bind registers the setting's flag on fs, writing to its field; the
// flag's default is what the field holds now.
func (s setting) bind(fs *flag.FlagSet) {
	if s.flag == "" {
		return
	}
	if s.each != nil {
		fs.Func(s.flag, s.usage, s.each)
		return
	}
	switch p := s.field.(type) {
	case *string:
		fs.StringVar(p, s.flag, *p, s.usage)
	case *bool:
		fs.BoolVar(p, s.flag, *p, s.usage)
	case *int:
		fs.IntVar(p, s.flag, *p, s.usage)
	case *int64:
		fs.Int64Var(p, s.flag, *p, s.usage)
	case *float64:
		fs.Float64Var(p, s.flag, *p, s.usage)
	case *time.Duration:
		fs.DurationVar(p, s.flag, *p, s.usage)
	default:
		panic(fmt.Sprintf("setting --%s: no flag for a %T", s.flag, s.field))
	}
}

// area is the settings of one concern and the check of their values.
type area struct {
	title    string
	settings func(c *Config) []setting
	validate func(c *Config, p *problems)
}

// problems collects what validation refuses, each error naming its key.
type problems struct{ errs []error }

func (p *problems) bad(key, format string, a ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
}

func (p *problems) add(errs ...error) { p.errs = append(p.errs, errs...) }

// settings lists every setting of c, area by area, pointing into c.
func (c *Config) settings() []setting {
	var out []setting
	for _, a := range areas {
		out = append(out, a.settings(c)...)
	}
	return out
}

// fieldID identifies a field by address and type: a struct and its first
// field share an address.
type fieldID struct {
	addr uintptr
	typ  reflect.Type
}

// fileKeys maps each field of c reachable through yaml tags to its dotted
// file key.
func fileKeys(c *Config) map[fieldID]string {
	out := map[fieldID]string{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for name, i := range yamlFields(v.Type()) {
			f := v.Field(i)
			key := join(path, name)
			out[fieldID{f.Addr().Pointer(), f.Type()}] = key
			if f.Kind() == reflect.Struct {
				walk(f, key)
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return out
}

// keyOf is the file key of a setting's field, given fileKeys of its Config.
func keyOf(keys map[fieldID]string, s setting) string {
	v := reflect.ValueOf(s.field)
	key, ok := keys[fieldID{v.Pointer(), v.Elem().Type()}]
	if !ok {
		panic(fmt.Sprintf("setting --%s: its field has no yaml key in Config", s.flag))
	}
	return key
}

// applyEnv sets the settings that name an environment variable from it
// when it is not empty, each bad value reported by its key.
func applyEnv(c *Config, getenv func(string) string) []error {
	keys := fileKeys(c)
	var errs []error
	for _, s := range c.settings() {
		v := getenv(s.env)
		if s.env == "" || v == "" {
			continue
		}
		fs := flag.NewFlagSet("env", flag.ContinueOnError)
		s.flag = "v"
		s.bind(fs)
		if err := fs.Set("v", v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s must be %s, got %q", keyOf(keys, s), s.env, want(reflect.TypeOf(s.field).Elem()), v))
		}
	}
	return errs
}

// shownDefault is a setting's default as the reference table prints it.
func shownDefault(s setting) string {
	if s.shown != "" {
		return s.shown
	}
	v := reflect.ValueOf(s.field).Elem()
	switch x := v.Interface().(type) {
	case time.Duration:
		return shortDuration(x)
	case string:
		if x == "" {
			return "–"
		}
		return "`" + x + "`"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	switch v.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer:
		return "–" // nothing unless given
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration drops the zero units time.Duration prints ("1m0s" → "1m").
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// referenceTable renders every setting, area by area, as the Markdown
// tables of docs/configuration.md.
func referenceTable() string {
	c := defaults()
	keys := fileKeys(&c)
	var b strings.Builder
	for _, a := range areas {
		fmt.Fprintf(&b, "\n### %s\n\n| file key | flag | environment | default | what it sets |\n|---|---|---|---|---|\n", a.title)
		for _, s := range a.settings(&c) {
			flagName, env := "–", "–"
			if s.flag != "" {
				flagName = "`--" + s.flag + "`"
				if s.each != nil {
					flagName += " (repeatable)"
				}
			}
			if s.env != "" {
				env = "`" + s.env + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", keyOf(keys, s), flagName, env, shownDefault(s), strings.ReplaceAll(s.usage, "|", "\\|"))
		}
	}
	return b.String()
}
