package agentconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// wantErr is one expected problem: the exact path and a fragment of the message.
type wantErr struct {
	path string
	msg  string
}

type parseCase struct {
	name string
	yaml string
	want []wantErr
}

// runCases parses each document and checks that exactly the expected
// problems are reported, each under its exact path, and that the error text
// starts with that path.
func runCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v; want %d errors", cfg, len(tc.want))
			}
			if cfg != nil {
				t.Errorf("Parse returned a config together with an error")
			}
			got := FieldErrors(err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Path != w.path {
					t.Errorf("error %d path = %q, want %q (%v)", i, g.Path, w.path, g)
				}
				if !strings.Contains(g.Msg, w.msg) {
					t.Errorf("error %d message = %q, want it to contain %q", i, g.Msg, w.msg)
				}
				if w.path != "" && !strings.HasPrefix(g.Error(), w.path+": ") {
					t.Errorf("error %d text %q does not start with its path", i, g.Error())
				}
				if !strings.Contains(err.Error(), g.Error()) {
					t.Errorf("joined error does not contain %q", g.Error())
				}
			}
		})
	}
}

// S-AG-1: the agent needs at least one backend.
func TestParse_S_AG_1_AtLeastOneBackend(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"empty file", "", []wantErr{{"backends", "at least one backend is required; the file is empty"}}},
		{"only comments", "# nothing here\n", []wantErr{{"backends", "the file is empty"}}},
		{"null document", "~\n", []wantErr{{"backends", "the file is empty"}}},
		{"missing key", "{}\n", []wantErr{{"backends", "the key is missing"}}},
		{"null list", "backends:\n", []wantErr{{"backends", "the list is empty"}}},
		{"empty list", "backends: []\n", []wantErr{{"backends", "the list is empty"}}},
		{"not a list", "backends: tank\n", []wantErr{{"backends", "must be a list, got a string"}}},
		{"backends is a mapping", "backends:\n  zfs: {pool: tank}\n", []wantErr{{"backends", "must be a list, got a mapping"}}},
		{"document is a list", "- zfs: {pool: tank}\n", []wantErr{{"", "must be a mapping with a top-level backends list"}}},
	})
}

// S-AG-3: each entry sets exactly one of zfs or lvm.
func TestParse_S_AG_3_ExactlyOneKind(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"neither", "backends:\n- {}\n", []wantErr{{"backends[0]", "sets neither zfs nor lvm; exactly one is required"}}},
		{"both", "backends:\n- zfs: {pool: tank}\n  lvm: {volumeGroup: vg0}\n", []wantErr{{"backends[0]", "sets both zfs and lvm; exactly one is allowed"}}},
		{"null entry", "backends:\n- zfs: {pool: tank}\n-\n", []wantErr{{"backends[1]", "must be a mapping with exactly one of zfs or lvm, got nothing"}}},
		{"scalar entry", "backends:\n- tank\n", []wantErr{{"backends[0]", "got a string"}}},
		{"zfs null", "backends:\n- zfs:\n", []wantErr{{"backends[0].zfs", "must be a mapping of ZFS settings, got nothing"}}},
		{"lvm scalar", "backends:\n- lvm: vg0\n", []wantErr{{"backends[0].lvm", "must be a mapping of LVM settings, got a string"}}},
		{"only an unknown kind", "backends:\n- nfs: {server: x}\n", []wantErr{
			{"backends[0].nfs", "unknown key (allowed: zfs, lvm)"},
			{"backends[0]", "sets neither zfs nor lvm"},
		}},
	})
}

// S-AG-4: zfs keys pool (required), volumeType (only zvol), parentDataset;
// properties is refused.
func TestParse_S_AG_4_ZFSKeys(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"pool missing", "backends:\n- zfs: {parentDataset: k8s}\n", []wantErr{{"backends[0].zfs.pool", "required"}}},
		{"pool null", "backends:\n- zfs: {pool: ~}\n", []wantErr{{"backends[0].zfs.pool", "required"}}},
		{"pool empty", "backends:\n- zfs: {pool: \"\"}\n", []wantErr{{"backends[0].zfs.pool", "must not be empty"}}},
		{"pool not a string", "backends:\n- zfs: {pool: 42}\n", []wantErr{{"backends[0].zfs.pool", "must be a string, got the int \"42\"; quote it"}}},
		{"pool is a list", "backends:\n- zfs: {pool: [a]}\n", []wantErr{{"backends[0].zfs.pool", "must be a string, got a list"}}},
		{"pool is a dataset path", "backends:\n- zfs: {pool: tank/k8s}\n", []wantErr{{"backends[0].zfs.pool", "is a dataset path, not a pool name"}}},
		{"pool starts with digit", "backends:\n- zfs: {pool: \"1tank\"}\n", []wantErr{{"backends[0].zfs.pool", "must start with a letter"}}},
		{"pool reserved", "backends:\n- zfs: {pool: mirror1}\n", []wantErr{{"backends[0].zfs.pool", "reserved by zpool"}}},
		{"volumeType filesystem", "backends:\n- zfs: {pool: tank, volumeType: filesystem}\n", []wantErr{{"backends[0].zfs.volumeType", `"filesystem" is not supported; the only volume type is "zvol"`}}},
		{"properties refused", "backends:\n- lvm: {volumeGroup: vg0}\n- zfs:\n    pool: tank\n    properties: {compression: lz4}\n", []wantErr{{"backends[1].zfs.properties", "ZFS properties are per-volume settings"}}},
		{"parentDataset absolute", "backends:\n- zfs: {pool: tank, parentDataset: /k8s}\n", []wantErr{{"backends[0].zfs.parentDataset", "must be relative to the pool"}}},
		{"parentDataset empty component", "backends:\n- zfs: {pool: tank, parentDataset: a//b}\n", []wantErr{{"backends[0].zfs.parentDataset", "not a valid dataset path"}}},
		{"parentDataset snapshot", "backends:\n- zfs: {pool: tank, parentDataset: a@snap}\n", []wantErr{{"backends[0].zfs.parentDataset", "not a valid dataset path"}}},
	})
}

// S-AG-5: lvm keys volumeGroup (required), thinPool, provisioningMode (and
// overprovisionRatio, beyond the seed: docs/pillar-csi.md).
func TestParse_S_AG_5_LVMKeys(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"volumeGroup missing", "backends:\n- lvm: {thinPool: tp}\n", []wantErr{{"backends[0].lvm.volumeGroup", "required"}}},
		{"volumeGroup number", "backends:\n- lvm: {volumeGroup: 7}\n", []wantErr{{"backends[0].lvm.volumeGroup", "must be a string"}}},
		{"volumeGroup bad chars", "backends:\n- lvm: {volumeGroup: \"vg 0\"}\n", []wantErr{{"backends[0].lvm.volumeGroup", "not a valid LVM name"}}},
		{"volumeGroup dash", "backends:\n- lvm: {volumeGroup: \"-vg\"}\n", []wantErr{{"backends[0].lvm.volumeGroup", "must not start with '-'"}}},
		{"thinPool bad", "backends:\n- lvm: {volumeGroup: vg0, thinPool: \"a/b\"}\n", []wantErr{{"backends[0].lvm.thinPool", "not a valid LVM name"}}},
		{"mode unknown", "backends:\n- lvm: {volumeGroup: vg0, provisioningMode: thick}\n", []wantErr{{"backends[0].lvm.provisioningMode", `"thick" is not a provisioning mode; use "linear" or "thin"`}}},
		{"thin without pool", "backends:\n- lvm: {volumeGroup: vg0, provisioningMode: thin}\n", []wantErr{{"backends[0].lvm.provisioningMode", `"thin" requires thinPool`}}},
		{"ratio below 1", "backends:\n- lvm: {volumeGroup: vg0, thinPool: tp, overprovisionRatio: 0.5}\n", []wantErr{{"backends[0].lvm.overprovisionRatio", `must be a number of at least 1 (e.g. 1, 2.5), got "0.5"`}}},
		{"ratio not a number", "backends:\n- lvm: {volumeGroup: vg0, thinPool: tp, overprovisionRatio: \"2\"}\n", []wantErr{{"backends[0].lvm.overprovisionRatio", `must be a number of at least 1`}}},
		{"ratio infinite", "backends:\n- lvm: {volumeGroup: vg0, thinPool: tp, overprovisionRatio: .inf}\n", []wantErr{{"backends[0].lvm.overprovisionRatio", `must be a number of at least 1`}}},
		{"ratio without thin pool", "backends:\n- lvm: {volumeGroup: vg0, overprovisionRatio: 2}\n", []wantErr{{"backends[0].lvm.overprovisionRatio", `needs thinPool`}}},
	})
}

// S-AG-7: each pool and group at most once; pool and group names differ.
func TestParse_S_AG_7_UniqueNames(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"pool twice", "backends:\n- zfs: {pool: tank}\n- zfs: {pool: tank, parentDataset: other}\n", []wantErr{{"backends[1].zfs.pool", `ZFS pool "tank" is already configured by backends[0]`}}},
		{"group twice", "backends:\n- lvm: {volumeGroup: vg0}\n- zfs: {pool: tank}\n- lvm: {volumeGroup: vg0, thinPool: tp}\n", []wantErr{{"backends[2].lvm.volumeGroup", `LVM volume group "vg0" is already configured by backends[0]`}}},
		{"pool equals group", "backends:\n- zfs: {pool: data}\n- lvm: {volumeGroup: data}\n", []wantErr{{"backends[1].lvm.volumeGroup", `has the same name as the ZFS pool of backends[0]; pool and volume group names must differ`}}},
		{"group equals pool", "backends:\n- lvm: {volumeGroup: data}\n- zfs: {pool: data}\n", []wantErr{{"backends[1].zfs.pool", `has the same name as the LVM volume group of backends[0]`}}},
		{"duplicate found despite other errors", "backends:\n- zfs: {pool: tank, volumeType: file}\n- zfs: {pool: tank}\n", []wantErr{
			{"backends[0].zfs.volumeType", "not supported"},
			{"backends[1].zfs.pool", "already configured by backends[0]"},
		}},
	})
}

// S-AG-8: unknown keys are refused with their path.
func TestParse_S_AG_8_UnknownKeys(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"top level", "backends:\n- zfs: {pool: tank}\nlisten: \":9500\"\n", []wantErr{{"listen", "unknown key (allowed: backends)"}}},
		{"entry level", "backends:\n- zfs: {pool: tank}\n  name: fast\n", []wantErr{{"backends[0].name", "unknown key (allowed: zfs, lvm)"}}},
		{"zfs level", "backends:\n- lvm: {volumeGroup: vg0}\n- zfs: {pool: tank, parent_dataset: k8s}\n", []wantErr{{"backends[1].zfs.parent_dataset", "unknown key (allowed: pool, volumeType, parentDataset)"}}},
		{"lvm level", "backends:\n- lvm: {volumeGroup: vg0, thinpool: tp}\n", []wantErr{{"backends[0].lvm.thinpool", "unknown key (allowed: volumeGroup, thinPool, provisioningMode, overprovisionRatio)"}}},
		{"duplicate key", "backends:\n- zfs:\n    pool: tank\n    pool: tank2\n", []wantErr{{"backends[0].zfs.pool", "duplicate key (first set on line 3)"}}},
		{"merge key", "base: &b {pool: tank}\nbackends:\n- zfs:\n    <<: *b\n", []wantErr{
			{"base", "unknown key"},
			{"backends[0].zfs.<<", "unknown key"},
			{"backends[0].zfs.pool", "required"},
		}},
	})
}

// Every problem is reported at once, in file order, each with its path and line.
func TestParse_ReportsAllErrors(t *testing.T) {
	t.Parallel()
	doc := `backends:
- zfs:
    pool: tank
    properties:
      compression: lz4
- lvm:
    volumeGroup: vg0
    provisioningMode: thin
    extra: 1
- zfs:
    pool: vg0
- {}
unknown: true
`
	_, err := Parse([]byte(doc))
	got := FieldErrors(err)
	want := []string{
		"backends[0].zfs.properties: ZFS properties are per-volume settings of the store resource, storage-class overrides or the PVC backend document; the agent configuration only places volumes (line 4)",
		"backends[1].lvm.extra: unknown key (allowed: volumeGroup, thinPool, provisioningMode, overprovisionRatio) (line 9)",
		`backends[1].lvm.provisioningMode: "thin" requires thinPool, the thin pool volumes are created in (line 8)`,
		`backends[2].zfs.pool: ZFS pool "vg0" has the same name as the LVM volume group of backends[1]; pool and volume group names must differ because volumes are routed by name (line 11)`,
		"backends[3]: sets neither zfs nor lvm; exactly one is required (line 12)",
		"unknown: unknown key (allowed: backends) (line 13)",
	}
	var texts []string
	for _, g := range got {
		texts = append(texts, g.Error())
	}
	// The top-level unknown key is found before the list is walked.
	want = append(want[len(want)-1:], want[:len(want)-1]...)
	if !reflect.DeepEqual(texts, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
}

func TestParse_DocumentErrors(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"invalid yaml", "backends: [\n", []wantErr{{"", "not valid YAML"}}},
		{"two documents", "backends:\n- zfs: {pool: tank}\n---\nbackends: []\n", []wantErr{{"", "only one YAML document is allowed"}}},
	})
}

func TestParse_Valid(t *testing.T) {
	t.Parallel()
	doc := `# rendered from agent.backends
backends:
  - zfs:
      pool: tank
  - zfs:
      pool: fast
      volumeType: zvol
      parentDataset: k8s/volumes
  - lvm:
      volumeGroup: vg0
  - lvm:
      volumeGroup: vg1
      thinPool: thin0
      provisioningMode: thin
  - lvm:
      volumeGroup: vg2
      thinPool: thin0
      overprovisionRatio: 2.5
`
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Backends: []Backend{
		{ZFS: &ZFS{Pool: "tank", VolumeType: "zvol"}},
		{ZFS: &ZFS{Pool: "fast", VolumeType: "zvol", ParentDataset: "k8s/volumes"}},
		// S-AG-5: linear is the default mode.
		{LVM: &LVM{VolumeGroup: "vg0", ProvisioningMode: "linear"}},
		{LVM: &LVM{VolumeGroup: "vg1", ThinPool: "thin0", ProvisioningMode: "thin"}},
		{LVM: &LVM{VolumeGroup: "vg2", ThinPool: "thin0", ProvisioningMode: "linear", OverprovisionRatio: 2.5}},
	}}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	var names []string
	for _, b := range cfg.Backends {
		names = append(names, b.Name())
	}
	if got := strings.Join(names, ","); got != "tank,fast,vg0,vg1,vg2" {
		t.Errorf("names = %s", got)
	}
}

func TestParse_AliasesResolve(t *testing.T) {
	t.Parallel()
	doc := "backends:\n- zfs: &z {pool: tank}\n- lvm: {volumeGroup: vg0}\n"
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Backends) != 2 || cfg.Backends[0].ZFS.Pool != "tank" {
		t.Fatalf("got %+v", cfg)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("backends:\n- lvm: {volumeGroup: vg0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Fatalf("Load(good): %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read agent config") {
		t.Fatalf("Load(missing) = %v", err)
	}
}
