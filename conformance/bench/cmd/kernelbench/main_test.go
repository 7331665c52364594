package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	console := "=== RUN   TestCSIOnRealKernel/ext4\r\n" +
		"PILLAR-BENCH csi-createvolume lvm-thin 412.5ms\r\n" +
		"[   12.3] nvme nvme0: new ctrl PILLAR-BENCH csi-nodestage nvme-tcp-ext4 2301.0ms\r\n" +
		"PILLAR-BENCH csi-createvolume lvm-thin 300.0ms\n" +
		"PILLAR-BENCH csi-createvolume lvm-thin 350.0ms\n" +
		"PILLAR-BENCH broken line\n" +
		"PILLAR-BENCH agent-createvolume zfs nanms\n"
	rows, err := parse(strings.NewReader(console))
	if err != nil {
		t.Fatal(err)
	}
	got := table(rows)
	for _, want := range []string{
		"| csi-createvolume | lvm-thin | 3 | 350.0 ms | 412.5 ms |",
		"| csi-nodestage | nvme-tcp-ext4 | 1 | 2301.0 ms | 2301.0 ms |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if len(rows) != 2 {
		t.Errorf("%d rows, want 2 (malformed lines skipped):\n%s", len(rows), got)
	}
}
