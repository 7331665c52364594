package server

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decodeConfigFile binds a YAML configuration file into c key by key, so
// that every bad key is reported at once and by its path
// ("plugins.call_timeout: invalid duration \"x\""), not as yaml's
// "cannot unmarshal !!str into time.Duration" with a line number.
func decodeConfigFile(data []byte, c *Config) []error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []error{err} // not YAML at all: yaml's own message names the line
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file
	}
	var errs []error
	bindNode(doc.Content[0], reflect.ValueOf(c).Elem(), "", &errs)
	return errs
}

var durationType = reflect.TypeOf(time.Duration(0))

// bindNode decodes n into v, recursing into structs (by yaml tag), maps and
// slices so each leaf error carries its dotted path.
func bindNode(n *yaml.Node, v reflect.Value, path string, errs *[]error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	bad := func(format string, a ...any) {
		key := path
		if key == "" {
			key = "(top level)"
		}
		*errs = append(*errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty key keeps its default
	}
	switch {
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		if v.IsNil() { // an optional section: present once named
			v.Set(reflect.New(v.Type().Elem()))
		}
		bindNode(n, v.Elem(), path, errs)
	case v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("want a mapping of keys, got %s", describe(n))
			return
		}
		fields := yamlFields(v.Type())
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			idx, ok := fields[k]
			if !ok {
				*errs = append(*errs, fmt.Errorf("%s: unknown key", join(path, k)))
				continue
			}
			bindNode(n.Content[i+1], v.Field(idx), join(path, k), errs)
		}
	case v.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("want a mapping, got %s", describe(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ev := reflect.New(v.Type().Elem()).Elem()
			before := len(*errs)
			bindNode(n.Content[i+1], ev, join(path, k), errs)
			if len(*errs) == before {
				v.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), ev)
			}
		}
	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("want a list, got %s", describe(n))
			return
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			bindNode(e, out.Index(i), path+"["+strconv.Itoa(i)+"]", errs)
		}
		v.Set(out)
	default:
		if n.Kind != yaml.ScalarNode {
			bad("want %s, got %s", want(v.Type()), describe(n))
			return
		}
		if v.Type() == durationType {
			d, err := time.ParseDuration(n.Value)
			if err != nil {
				bad("invalid duration %q (examples: 500ms, 30s, 5m)", n.Value)
				return
			}
			v.SetInt(int64(d))
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			bad("want %s, got %q", want(v.Type()), n.Value)
		}
	}
}

// yamlFields maps a struct's yaml keys to field indexes.
func yamlFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		out[name] = i
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// want names what a key of type t takes, in the file's terms.
func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a " + t.Kind().String()
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}
