package csiids

import "testing"

func TestVolumeRoundTrip(t *testing.T) {
	v := Volume{Store: "fast", Pool: "tank", Name: "pvc-1"}
	got, err := ParseVolume(v.String())
	if err != nil || got != v {
		t.Fatalf("%v, %v", got, err)
	}
	if v.NQN() != "nqn.2026-11.io.pillarhq.pillar-csi:volume:tank:pvc-1" {
		t.Fatal(v.NQN())
	}
	for _, bad := range []string{"", "a/b", "a//c", "/b/c", "a/b/c/d", "some-fake-id"} {
		if _, err := ParseVolume(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestNodeRoundTrip(t *testing.T) {
	n := Node{Name: "worker-1", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:1234"}
	got, err := ParseNode(n.String())
	if err != nil || got != n {
		t.Fatalf("%v, %v", got, err)
	}
	for _, bad := range []string{"", "worker", "worker/", "worker/not-nqn", "/nqn.x", "a/nqn.x/y"} {
		if _, err := ParseNode(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := Snapshot{Store: "fast", Pool: "tank", Name: "sn-0a"}
	got, err := ParseSnapshot(s.String())
	if err != nil || got != s || s.String() != "fast/tank/sn-0a" {
		t.Fatalf("%v, %v", got, err)
	}
	for _, bad := range []string{"", "fast/tank", "fast//x", "a/b/c/d"} {
		if _, err := ParseSnapshot(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
