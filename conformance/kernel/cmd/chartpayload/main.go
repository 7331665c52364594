// Command chartpayload puts the pillar-csi chart's pods onto the qemu
// guest's payload (scripts/e2e-kernel.sh): it renders the chart with
// Helm's packages and the guest's values (chartpod.GuestValues), keeps the
// agent and node pod specs and their ConfigMaps, and unpacks the images
// those pods name (the chart's default references, which scripts/images.sh
// tags on the local builds) from `docker save` into layer directories,
// each layer once however many images share it. It writes DIR/pods.json
// and DIR/layers/.
//
//	go run ./conformance/kernel/cmd/chartpayload DIR
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pillarhq/pillar/conformance/charts"
	"github.com/pillarhq/pillar/conformance/kernel/chartpod"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chartpayload DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chartpayload:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	objs, err := charts.Render("pillar-csi", chartpod.GuestValues())
	if err != nil {
		return err
	}
	var manifests [][]byte
	for _, o := range objs {
		manifests = append(manifests, o.JSON)
	}
	p, err := chartpod.FromManifests(manifests)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "layers"), 0o755); err != nil {
		return err
	}
	if err := unpackImages(p, dir); err != nil {
		return err
	}
	j, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pods.json"), j, 0o644)
}

// saved is one image of `docker save`'s manifest.json.
type saved struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// unpackImages saves the pods' images in one archive and unpacks each
// distinct layer with tar (as root, so owners, modes and device nodes are
// kept) into DIR/layers/<digest of the layer file>.
func unpackImages(p *chartpod.Payload, dir string) error {
	refs := p.ImageRefs()
	tmp, err := os.MkdirTemp("", "chartpayload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	save := exec.Command("bash", append([]string{"-c", `set -o pipefail; docker save "$@" | tar -x -C "$0"`, tmp}, refs...)...)
	if out, err := save.CombinedOutput(); err != nil {
		return fmt.Errorf("docker save %s: %v: %s (scripts/images.sh builds and tags them)", strings.Join(refs, " "), err, out)
	}
	var manifest []saved
	if err := readJSON(filepath.Join(tmp, "manifest.json"), &manifest); err != nil {
		return err
	}
	byRef := map[string]saved{}
	for _, m := range manifest {
		for _, t := range m.RepoTags {
			byRef[t] = m
		}
	}
	unpacked := map[string]string{}
	for _, ref := range refs {
		m, ok := byRef[ref]
		if !ok {
			// docker names Docker Hub images without the registry
			// and the library/ namespace.
			m, ok = byRef[strings.TrimPrefix(strings.TrimPrefix(ref, "docker.io/"), "library/")]
		}
		if !ok {
			return fmt.Errorf("docker save wrote no image %s", ref)
		}
		var cfg struct {
			Config struct {
				Entrypoint, Cmd, Env []string
				WorkingDir           string
			} `json:"config"`
		}
		if err := readJSON(filepath.Join(tmp, m.Config), &cfg); err != nil {
			return err
		}
		img := chartpod.Image{Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir}
		for _, l := range m.Layers {
			rel, ok := unpacked[l]
			if !ok {
				if rel, err = unpackLayer(filepath.Join(tmp, l), dir); err != nil {
					return fmt.Errorf("%s: layer %s: %w", ref, l, err)
				}
				unpacked[l] = rel
			}
			img.Layers = append(img.Layers, rel)
		}
		p.Images[ref] = img
	}
	return nil
}

func unpackLayer(file, dir string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = f.WriteTo(h)
	f.Close()
	if err != nil {
		return "", err
	}
	rel := filepath.Join("layers", hex.EncodeToString(h.Sum(nil))[:16])
	dst := filepath.Join(dir, rel)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.Command("tar", "-x", "-p", "--numeric-owner", "-C", dst, "-f", file).CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	// Deletions in a layer (whiteout files) would need converting to
	// overlayfs's form; the chart's images have none, so refuse rather
	// than ship a layer that resurrects deleted files.
	var whiteout string
	err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".wh.") {
			whiteout = p
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("looking for whiteouts in %s: %w", dst, err)
	}
	if whiteout != "" {
		return "", fmt.Errorf("whiteout %s: layers that delete files are not supported", whiteout)
	}
	return rel, nil
}

func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
