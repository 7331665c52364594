package controller

import (
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/pillarhq/pillar/impl/cli"
)

// The defaults are the chart's contract: a change here is a chart change.
func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Driver: "pillar-csi.pillarhq.io", Endpoint: "unix:///csi/csi.sock", ProbeAddr: ":8081",
		MetricsAddr: ":8080", AgentPort: 9500, LogLevel: "info"}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("defaults %+v, want %+v", *c, want)
	}
}

func TestParseConfigUsageErrors(t *testing.T) {
	var u *cli.UsageError
	if _, err := ParseConfig([]string{"--log-level", "loud"}, io.Discard); !errors.As(err, &u) {
		t.Fatalf("bad --log-level: %v, want a usage error", err)
	}
	if _, err := ParseConfig([]string{"--no-such-flag"}, io.Discard); !errors.As(err, &u) || !u.Printed {
		t.Fatalf("unknown flag: %v, want a usage error the flag package printed", err)
	}
}
