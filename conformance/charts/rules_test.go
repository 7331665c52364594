package charts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/pillarhq/pillar/conformance/charts"
)

// ruleFile is the part of a Prometheus rule file the suite reads.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// promtoolTests is the part of a promtool test file the suite reads.
type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

var _ = Describe("proxy chart alerting rules", func() {
	alertingRuleSpecs("proxy", map[string]any{"prometheusRule": map[string]any{"enabled": true, "additionalLabels": map[string]any{"release": "prom"}}}, "pillar-proxy", "storage")
})

var _ = Describe("pillar-csi chart alerting rules", func() {
	alertingRuleSpecs("pillar-csi", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "additionalLabels": map[string]any{"release": "prom"}}}}, "pillar-pillar-csi", "storage")
})

// alertingRuleSpecs checks a chart's alerts/<chart>.rules.yaml: rendered
// unchanged as the PrometheusRule that enabled values create (named name,
// in namespace), with promtool tests in testdata/<chart>-rules.test.yaml
// that expect every alert to fire.
func alertingRuleSpecs(chart string, enabled map[string]any, name, namespace string) {
	rulesPath := filepath.Join(charts.Dir(chart), "alerts", chart+".rules.yaml")
	testPath, _ := filepath.Abs(filepath.Join("testdata", chart+"-rules.test.yaml"))

	readRules := func() (ruleFile, string) {
		raw, err := os.ReadFile(rulesPath)
		Expect(err).NotTo(HaveOccurred())
		var rf ruleFile
		Expect(charts.UnmarshalYAML(string(raw), &rf)).To(Succeed())
		return rf, string(raw)
	}

	It("renders no PrometheusRule by default and the rule file's groups as its spec when enabled", func() {
		objs, err := charts.Render(chart, nil)
		Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			Expect(o.Kind).NotTo(Equal("PrometheusRule"))
		}
		objs, err = charts.Render(chart, enabled)
		Expect(err).NotTo(HaveOccurred())
		pr := find(objs, "PrometheusRule", name)
		Expect(pr.Map["apiVersion"]).To(Equal("monitoring.coreos.com/v1"))
		md := pr.Map["metadata"].(map[string]any)
		Expect(md["namespace"]).To(Equal(namespace))
		Expect(md["labels"]).To(HaveKeyWithValue("release", "prom"))
		Expect(md["labels"]).To(HaveKeyWithValue("app.kubernetes.io/name", chart))
		_, raw := readRules()
		var want map[string]any
		Expect(charts.UnmarshalYAML(raw, &want)).To(Succeed())
		Expect(pr.Map["spec"]).To(Equal(want), "the PrometheusRule carries the rule file unchanged ({{ $labels }} templates included)")
	})

	It("has a promtool test expecting each alert to fire", func() {
		rf, _ := readRules()
		var alerts []string
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				Expect(r.Alert).NotTo(BeEmpty(), "the file holds alerting rules only")
				alerts = append(alerts, r.Alert)
			}
		}
		raw, err := os.ReadFile(testPath)
		Expect(err).NotTo(HaveOccurred())
		var pt promtoolTests
		Expect(charts.UnmarshalYAML(string(raw), &pt)).To(Succeed())
		abs, err := filepath.Abs(filepath.Join(filepath.Dir(testPath), pt.RuleFiles[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(abs).To(Equal(rulesPath), "the test file runs the chart's rule file")
		fired := map[string]bool{}
		for _, t := range pt.Tests {
			for _, a := range t.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
		}
		var missing []string
		for _, a := range alerts {
			if !fired[a] {
				missing = append(missing, a)
			}
		}
		sort.Strings(missing)
		Expect(missing).To(BeEmpty(), "alerts no promtool test expects to fire")
	})

	It("passes promtool check rules and promtool test rules", func() {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			if os.Getenv("CI") == "true" {
				Fail("promtool is not installed: scripts/setup.sh installs Debian's prometheus package, which ships it")
			}
			Skip("promtool not installed (bash scripts/setup.sh installs it)")
		}
		out, err := exec.Command(promtool, "check", "rules", rulesPath).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		cmd := exec.Command(promtool, "test", "rules", filepath.Base(testPath))
		cmd.Dir = filepath.Dir(testPath)
		out, err = cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(string(out)).To(ContainSubstring("SUCCESS"))
	})
}
