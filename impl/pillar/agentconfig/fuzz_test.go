package agentconfig

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary documents to the parser. Whatever the input, Parse
// returns either a config or an error made only of FieldErrors (the agent
// prints each with its path), and an accepted config holds the invariants the
// agent routes volumes by; rendering it back and parsing again gives the same
// config.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"backends: []",
		"backends:\n- zfs:\n    pool: tank\n",
		"backends:\n- zfs:\n    pool: tank\n    parentDataset: k8s/vols\n    volumeType: zvol\n",
		"backends:\n- lvm:\n    volumeGroup: vg0\n    thinPool: tp\n    provisioningMode: thin\n",
		"backends:\n- lvm:\n    volumeGroup: vg0\n- zfs:\n    pool: tank\n",
		"backends:\n- zfs:\n    pool: tank\n  lvm:\n    volumeGroup: vg0\n",
		"backends:\n- zfs:\n    pool: tank\n    properties: {compression: lz4}\n",
		"backends:\n- lvm:\n    volumeGroup: dup\n- zfs:\n    pool: dup\n",
		"a: &a [*a]\n",
		"backends: &x\n- zfs: {pool: p}\nother: *x\n",
		"---\nbackends: []\n---\nbackends: []\n",
		"backends:\n- {zfs: {pool: \"t\\u0000ank\"}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v: want exactly one", cfg, err)
		}
		if err != nil {
			fes := FieldErrors(err)
			if len(fes) == 0 {
				t.Fatalf("error %q holds no FieldError", err)
			}
			for _, fe := range fes {
				if fe.Msg == "" {
					t.Fatalf("FieldError at %q has no message", fe.Path)
				}
			}
			return
		}
		if len(cfg.Backends) == 0 {
			t.Fatal("accepted a config with no backend")
		}
		names := map[string]bool{}
		for i, b := range cfg.Backends {
			if (b.ZFS == nil) == (b.LVM == nil) {
				t.Fatalf("backends[%d]: want exactly one of zfs and lvm", i)
			}
			if b.ZFS != nil && b.ZFS.VolumeType != VolumeTypeZvol {
				t.Fatalf("backends[%d]: volume type %q", i, b.ZFS.VolumeType)
			}
			if b.LVM != nil && b.LVM.ProvisioningMode != ProvisioningLinear && b.LVM.ProvisioningMode != ProvisioningThin {
				t.Fatalf("backends[%d]: provisioning mode %q", i, b.LVM.ProvisioningMode)
			}
			if b.Name() == "" || names[b.Name()] {
				t.Fatalf("backends[%d]: empty or duplicate routing name %q", i, b.Name())
			}
			names[b.Name()] = true
		}
		again, err := Parse([]byte(render(cfg)))
		if err != nil {
			t.Fatalf("the accepted config does not parse when rendered back: %v\n%s", err, render(cfg))
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed the config: %+v -> %+v", cfg, again)
		}
	})
}

// render writes a config in the documented format, every string quoted.
func render(cfg *Config) string {
	var b strings.Builder
	b.WriteString("backends:\n")
	for _, be := range cfg.Backends {
		switch {
		case be.ZFS != nil:
			fmt.Fprintf(&b, "- zfs:\n    pool: %q\n    volumeType: %q\n", be.ZFS.Pool, be.ZFS.VolumeType)
			if be.ZFS.ParentDataset != "" {
				fmt.Fprintf(&b, "    parentDataset: %q\n", be.ZFS.ParentDataset)
			}
		case be.LVM != nil:
			fmt.Fprintf(&b, "- lvm:\n    volumeGroup: %q\n    provisioningMode: %q\n", be.LVM.VolumeGroup, be.LVM.ProvisioningMode)
			if be.LVM.ThinPool != "" {
				fmt.Fprintf(&b, "    thinPool: %q\n", be.LVM.ThinPool)
			}
		}
	}
	return b.String()
}
