package alerts_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/alerts"
)

// Every condition names an alert of the shipped rules file, and no two
// conditions name the same one: operators read one name in Alertmanager
// and in a webhook's "rule".
func TestConditionsNameRulesFileAlerts(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "proxy", "alerts", "proxy.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		inFile[m[1]] = true
	}
	seen := map[string]string{}
	for _, c := range alerts.Conditions {
		rule := alerts.Rules[c]
		if !inFile[rule] {
			t.Errorf("condition %s names %q, not an alert of the rules file %v", c, rule, inFile)
		}
		if other, dup := seen[rule]; dup {
			t.Errorf("conditions %s and %s both name %s", other, c, rule)
		}
		seen[rule] = c
	}
	if len(alerts.Rules) != len(alerts.Conditions) {
		t.Errorf("%d rules for %d conditions", len(alerts.Rules), len(alerts.Conditions))
	}
}
