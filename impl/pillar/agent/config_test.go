package agent

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// The defaults are the chart's contract: a change here is a chart change.
func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ConfigFile: "/etc/pillar-csi/agent/config.yaml", Listen: ":9500", NvmetRoot: nvmet.DefaultRoot,
		NvmetAddress: "0.0.0.0", NvmetPort: 4420, NvmetPortID: 1, DeviceRoot: "/dev", StateDir: "/var/lib/pillar-csi/agent", LogLevel: "info"}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("defaults %+v, want %+v", *c, want)
	}
}

// Every bad value is reported at once, including those an option checks.
func TestParseConfigReportsEveryError(t *testing.T) {
	var size string
	opt := WithFlags(func(fs *flag.FlagSet) func(*Config) error {
		fs.StringVar(&size, "sim-pool-size", "", "")
		return func(*Config) error { return errors.New("--sim-pool-size: invalid size " + size) }
	})
	_, err := ParseConfig([]string{"--log-level", "loud", "--sim-pool-size", "huge"}, io.Discard, opt)
	var u *cli.UsageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--log-level") || !strings.Contains(err.Error(), "invalid size huge") {
		t.Fatalf("err %v, want both problems as a usage error", err)
	}
}

// An option replaces the storage field by field; what it leaves zero is
// the node's own.
func TestOpenStorage(t *testing.T) {
	c, _ := ParseConfig([]string{"--tools-dir", "/opt/tools", "--device-root", "/host/dev"}, io.Discard)
	s, err := openStorage(c, &agentconfig.Config{}, slog.Default(), collect(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Runner.(*backend.ExecRunner); !ok || r.Dir != "/opt/tools" || s.DeviceRoot != "/host/dev" || s.Target != (nvmet.OSFS{}) {
		t.Fatalf("own storage %+v", s)
	}
	runner := &backend.ExecRunner{Dir: "/sim/bin"}
	s, err = openStorage(c, &agentconfig.Config{}, slog.Default(), collect([]Option{WithStorage(func(*Config, *agentconfig.Config, *slog.Logger) (Storage, error) {
		return Storage{Runner: runner}, nil
	})}))
	if err != nil || s.Runner != runner || s.DeviceRoot != "/host/dev" {
		t.Fatalf("replaced storage %+v, %v", s, err)
	}
	_, err = openStorage(c, &agentconfig.Config{}, slog.Default(), collect([]Option{WithStorage(func(*Config, *agentconfig.Config, *slog.Logger) (Storage, error) {
		return Storage{}, errors.New("no simulation")
	})}))
	if err == nil {
		t.Fatal("the option's error was dropped")
	}
}

// --check-config answers on the injected stdout; an invalid file is an
// error naming each bad path, one a line (S-AG-1, S-AG-8).
func TestMainCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var out bytes.Buffer
	good := write("good.yaml", "backends:\n  - zfs: {pool: tank}\n")
	if err := Main(context.Background(), []string{"--config", good, "--check-config"}, os.Getenv, io.Discard, WithStdout(&out)); err != nil {
		t.Fatal(err)
	}
	if out.String() != good+": 1 backend(s), valid\n" {
		t.Fatalf("stdout %q", out.String())
	}
	bad := write("bad.yaml", "backends:\n  - zfs: {pool: a}\n    extra: 1\n")
	err := Main(context.Background(), []string{"--config", bad, "--check-config"}, os.Getenv, io.Discard)
	var u *cli.UsageError
	if err == nil || errors.As(err, &u) || !strings.HasPrefix(err.Error(), "invalid configuration "+bad+":\n  ") || !strings.Contains(err.Error(), "backends[0].extra") {
		t.Fatalf("err %v", err)
	}
}
