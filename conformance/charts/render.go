// Package charts renders the project's Helm charts with Helm's own Go
// packages and decodes the manifests strictly into Kubernetes API types,
// for the chart suites.
package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pillarhq/pillar/impl/testing/modroot"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// Dir is the directory of a chart of the repository.
func Dir(name string) string {
	return filepath.Join(modroot.Dir(), "charts", name)
}

// Object is one rendered manifest.
type Object struct {
	Source string // template file
	Kind   string
	Name   string
	JSON   []byte
	Map    map[string]any
}

// Render renders a chart as `helm install` would (release "pillar" in
// namespace "storage"), with the values validated against the chart's
// schema, and returns the manifests in file order.
func Render(name string, values map[string]any) ([]Object, error) {
	ch, err := loader.Load(Dir(name))
	if err != nil {
		return nil, err
	}
	return RenderChart(ch, values)
}

// RenderChart renders a loaded chart.
func RenderChart(ch *chart.Chart, values map[string]any) ([]Object, error) {
	files, err := renderFiles(ch, values)
	if err != nil {
		return nil, err
	}
	var names []string
	for f := range files {
		if strings.HasSuffix(f, ".yaml") {
			names = append(names, f)
		}
	}
	sort.Strings(names)
	var out []Object
	for _, f := range names {
		for _, doc := range splitDocs(files[f]) {
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			var m map[string]any
			if err := json.Unmarshal(j, &m); err != nil || m == nil {
				continue
			}
			o := Object{Source: f, JSON: j, Map: m}
			o.Kind, _ = m["kind"].(string)
			if md, ok := m["metadata"].(map[string]any); ok {
				o.Name, _ = md["name"].(string)
			}
			out = append(out, o)
		}
	}
	return out, nil
}

func splitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}

// Decode decodes JSON into v, refusing unknown fields.
func Decode(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data")
	}
	return nil
}

// YAML renders JSON as YAML (golden files).
func YAML(j []byte) (string, error) {
	b, err := yaml.JSONToYAML(j)
	return string(b), err
}

// UnmarshalYAML decodes YAML.
func UnmarshalYAML(s string, v any) error { return yaml.Unmarshal([]byte(s), v) }

// renderFiles renders every template of a loaded chart, by file name.
func renderFiles(ch *chart.Chart, values map[string]any) (map[string]string, error) {
	if values == nil {
		values = map[string]any{}
	}
	if err := chartutil.ValidateAgainstSchema(ch, values); err != nil {
		return nil, fmt.Errorf("values don't meet the schema: %w", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "pillar", Namespace: "storage", IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

// RenderNotes renders a chart's templates/NOTES.txt as `helm install`
// prints it after the install.
func RenderNotes(name string, values map[string]any) (string, error) {
	ch, err := loader.Load(Dir(name))
	if err != nil {
		return "", err
	}
	files, err := renderFiles(ch, values)
	if err != nil {
		return "", err
	}
	notes, ok := files[name+"/templates/NOTES.txt"]
	if !ok {
		return "", fmt.Errorf("%s has no templates/NOTES.txt", name)
	}
	return notes, nil
}
