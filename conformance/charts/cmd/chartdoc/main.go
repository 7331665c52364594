// Command chartdoc regenerates a chart's README values table and
// values.schema.json from its values.yaml: chartdoc charts/pillar-csi.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pillarhq/pillar/conformance/charts/chartdoc"
)

func main() {
	for _, dir := range os.Args[1:] {
		readme, schema, err := chartdoc.Generate(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chartdoc:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(dir, "README.md"), readme, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(dir, "values.schema.json"), schema, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
