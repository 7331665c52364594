package csinode

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/cli"
)

// The defaults are the chart's contract: a change here is a chart change.
func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]string{"--node-id", "n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Driver: "pillar-csi.pillarhq.io", Endpoint: "unix:///csi/csi.sock", NodeID: "n1",
		HostNQNFile: "/etc/nvme/hostnqn", HostIDFile: "/etc/nvme/hostid", Connector: "nvme",
		StateDir: "/var/lib/pillar-csi/node", LogLevel: "info"}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("defaults %+v, want %+v", *c, want)
	}
}

// Every bad value is reported at once, as a usage error (exit status 2).
func TestParseConfigReportsEveryError(t *testing.T) {
	_, err := ParseConfig([]string{"--log-level", "loud", "--ctrl-loss-tmo", "-2", "--keep-alive-tmo", "-1", "--connector", "loop"}, io.Discard)
	var u *cli.UsageError
	if !errors.As(err, &u) {
		t.Fatalf("err %v, want a usage error", err)
	}
	for _, want := range []string{"--log-level", "--node-id is required", "--ctrl-loss-tmo", "--keep-alive-tmo", `--connector "loop": nvme`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// A connector and flags from options join the command line; their check
// runs with the others.
func TestParseConfigOptions(t *testing.T) {
	var root string
	opts := []Option{
		WithFlags(func(fs *flag.FlagSet) func(*Config) error {
			fs.StringVar(&root, "sim-root", "", "")
			return func(c *Config) error {
				if c.Connector == "loop" && root == "" {
					return errors.New("--connector=loop needs --sim-root")
				}
				return nil
			}
		}),
		WithConnector("loop", "loop devices", func(*Config) (Connector, error) { return nil, nil }),
	}
	if _, err := ParseConfig([]string{"--node-id", "n", "--connector", "loop", "--sim-root", "/s"}, io.Discard, opts...); err != nil || root != "/s" {
		t.Fatalf("err %v, root %q", err, root)
	}
	root = ""
	_, err := ParseConfig([]string{"--connector", "loop"}, io.Discard, opts...)
	if err == nil || !strings.Contains(err.Error(), "--node-id is required") || !strings.Contains(err.Error(), "needs --sim-root") {
		t.Fatalf("err %v, want both problems", err)
	}
	_, err = ParseConfig([]string{"--node-id", "n", "--connector", "rdma"}, io.Discard, opts...)
	if err == nil || !strings.Contains(err.Error(), `--connector "rdma": loop or nvme`) {
		t.Fatalf("err %v", err)
	}
}
