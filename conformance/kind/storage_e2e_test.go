//go:build kinde2e

package kind_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
)

// Kubernetes' own external storage suite (test/e2e/storage/external) run
// by its e2e.test binary against this cluster, with the driver
// definitions of testdata/storage-e2e (LVM thin and ZFS): the tests every
// CSI driver is held to, beside this suite's own. docs/kind.md lists what
// ran, what was skipped and why.

var (
	storageE2E       = flag.String("storage-e2e", "", "Kubernetes' e2e.test (scripts/kind/e2e-binary.sh); the storage-e2e spec runs its external storage suite")
	storageE2EGinkgo = flag.String("storage-e2e-ginkgo", "", "the ginkgo CLI built beside e2e.test, to run its specs in parallel processes")
	storageE2EProcs  = flag.Int("storage-e2e-procs", 3, "parallel e2e.test processes (specs mostly wait for the cluster)")
	storageE2EImages = flag.String("storage-e2e-images", "", "comma-separated images the storage patterns use, loaded into the node (scripts/kind/e2e-images.sh)")
	storageE2EFocus  = flag.String("storage-e2e-focus", "", "regular expression of the external storage specs to run; empty: make test's subset (make e2e-storage: all)")
	storageE2EOut    = flag.String("storage-e2e-out", "", "file the results table (markdown) is written to")
	storageE2ETime   = flag.Duration("storage-e2e-timeout", 40*time.Minute, "time limit of the external storage run")
)

// storageE2EDefaultFocus is make test's subset, kept to a few minutes: one
// spec of each pattern docs/kind.md lists, on both stores (make
// e2e-storage runs every external storage spec).
var storageE2EDefaultFocus = `External Storage \[Driver: pillar-(lvm-thin|zfs)\] \[Testpattern: (` + strings.Join([]string{
	`Dynamic PV \(default fs\)\] provisioning should provision storage with snapshot data source \[Feature:VolumeSnapshotDataSource\]$`,
	`Dynamic PV \(default fs\)\] provisioning should provision storage with pvc data source$`,
	`Dynamic PV \(default fs\)\] volumes should store data`,
	`Dynamic PV \(default fs\)\] volumeIO should write files of various sizes`,
	`Dynamic PV \(block volmode\)\] volumeMode should not mount / map unused volumes`,
	`Dynamic PV \(xfs\)\] volume-expand should resize volume when PVC is edited while pod is using it`,
	`Dynamic Snapshot \(delete policy\)\] snapshottable .* check restore correctly works after modifying source data, check deletion \(persistent\)`,
	`Generic Ephemeral-volume \(default fs\) \(late-binding\)\] ephemeral should create read/write inline ephemeral volume`,
	`Dynamic PV \(default fs\)\] subPath should support existing directory$`,
	`Dynamic PV \(default fs\)\] fsgroupchangepolicy \(OnRootMismatch\)\[LinuxOnly\], pod created with an initial fsgroup, new pod fsgroup applied`,
	`Dynamic PV \(xfs\)\] multiVolume should concurrently access the volume and restored snapshot from pods on the same node`,
	`Dynamic PV \(default fs\)\] read-write-once-pod should block a second pod`,
}, "|") + `)`

// storageE2ESkip: specs this cluster cannot run, each for a reason of
// the environment, not of the driver (docs/kind.md):
//   - [Disruptive]: they restart the kubelet under the other processes' pods;
//   - "different node": there is one node;
//   - ext4 growth on the node (volume-expand and generic ephemeral
//     expansion of the default fs): resize2fs of a mounted ext4 needs
//     CAP_SYS_RESOURCE, which this VM withholds from the kind node; the
//     same growth runs on the real kernel (make e2e-kernel), and xfs and
//     block growth run here.
var storageE2ESkip = strings.Join([]string{
	`\[Disruptive\]`,
	`different node`,
	`\(default fs\)\(allowExpansion\)\] volume-expand`,
	`Generic Ephemeral-volume \(default fs\).*\] ephemeral should support expansion`,
}, "|")

// storageE2EImageRefs are the images of -storage-e2e-images.
func storageE2EImageRefs() []string {
	if *storageE2EImages == "" {
		return nil
	}
	return strings.Split(*storageE2EImages, ",")
}

// storageResult is one spec of the external suite's report.
type storageResult struct {
	Driver, Name, State, Reason string
	RunTime                     time.Duration
}

var driverInName = regexp.MustCompile(`\[Driver: ([^\]]+)\]`)

// storageResults reads the specs that were run (not filtered out) from a
// Ginkgo JSON report.
func storageResults(path string) []storageResult {
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var reports []types.Report
	Expect(json.Unmarshal(b, &reports)).To(Succeed())
	var out []storageResult
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt {
				continue
			}
			name := strings.TrimSpace(strings.Join(s.ContainerHierarchyTexts, " ") + " " + s.LeafNodeText)
			// Filtered out by focus or skip: not run, no message.
			if s.State == types.SpecStateSkipped && s.Failure.Message == "" {
				continue
			}
			if s.State == types.SpecStatePending {
				continue
			}
			d := ""
			if m := driverInName.FindStringSubmatch(name); m != nil {
				d = m[1]
			}
			reason := ""
			if s.State != types.SpecStatePassed {
				reason = firstLine(s.Failure.Message)
			}
			out = append(out, storageResult{Driver: d, Name: name, State: s.State.String(), Reason: reason, RunTime: s.RunTime})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// storageTable renders the counts per driver and every spec not passed,
// with its reason.
func storageTable(res []storageResult, took time.Duration) string {
	counts := map[string]map[string]int{}
	var drivers []string
	for _, r := range res {
		if counts[r.Driver] == nil {
			counts[r.Driver] = map[string]int{}
			drivers = append(drivers, r.Driver)
		}
		counts[r.Driver][r.State]++
	}
	sort.Strings(drivers)
	var b strings.Builder
	fmt.Fprintf(&b, "external storage suite: %d specs run in %s\n\n| driver | passed | failed | skipped |\n|---|---|---|---|\n", len(res), took.Round(time.Second))
	for _, d := range drivers {
		c := counts[d]
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", d, c["passed"], c["failed"]+c["panicked"]+c["interrupted"]+c["timedout"]+c["aborted"], c["skipped"])
	}
	// Skips by reason (their names are long and many share one reason).
	skips := map[string]int{}
	for _, r := range res {
		if r.State == "skipped" {
			skips[r.Reason]++
		}
	}
	if len(skips) > 0 {
		var reasons []string
		for k := range skips {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		b.WriteString("\n| skipped at run time because | specs |\n|---|---|\n")
		for _, k := range reasons {
			fmt.Fprintf(&b, "| %s | %d |\n", strings.ReplaceAll(k, "|", "\\|"), skips[k])
		}
	}
	for _, r := range res {
		if r.State != "passed" && r.State != "skipped" {
			fmt.Fprintf(&b, "\n%s: %s\n    %s\n", strings.ToUpper(r.State), r.Name, r.Reason)
		}
	}
	return b.String()
}

// driverDefinition copies a driver definition of testdata to dir with its
// snapshot class file named by absolute path: e2e.test reads that file
// relative to its working directory, which the ginkgo CLI sets to the
// binary's own.
func driverDefinition(td, dir, name string) string {
	b, err := os.ReadFile(filepath.Join(td, name))
	Expect(err).NotTo(HaveOccurred())
	const rel = "FromFile: snapshot-class.yaml"
	Expect(string(b)).To(ContainSubstring(rel), name)
	out := filepath.Join(dir, "storage-e2e-"+name)
	Expect(os.WriteFile(out, []byte(strings.Replace(string(b), rel, "FromFile: "+filepath.Join(td, "snapshot-class.yaml"), 1)), 0o644)).To(Succeed())
	return out
}

// runStorageE2E runs e2e.test's external storage specs against the
// cluster, in parallel processes through the ginkgo CLI when it was built,
// and returns the path of the JSON report.
func runStorageE2E(c context.Context, dir string) string {
	td, err := filepath.Abs("testdata/storage-e2e")
	Expect(err).NotTo(HaveOccurred())
	report := filepath.Join(dir, "storage-e2e.json")
	logPath := filepath.Join(dir, "storage-e2e.log")
	os.Remove(report)
	e2eArgs := []string{
		"-kubeconfig=" + kc.Kubeconfig,
		// The storage classes' files are named relative to it.
		"-repo-root=" + td,
		"-storage.testdriver=" + driverDefinition(td, dir, "thin.yaml"),
		"-storage.testdriver=" + driverDefinition(td, dir, "zfs.yaml"),
		"-report-dir=" + dir,
		// Images are loaded into the node; nothing is pulled.
		"-prepull-images=false",
	}
	focus := *storageE2EFocus
	if focus == "" {
		focus = storageE2EDefaultFocus
	}
	var cmd *exec.Cmd
	if *storageE2EGinkgo != "" {
		args := []string{"--procs=" + fmt.Sprint(*storageE2EProcs), "--focus=" + focus, "--skip=" + storageE2ESkip,
			"--json-report=" + report, "--no-color", "--timeout=" + storageE2ETime.String(), *storageE2E, "--"}
		cmd = exec.CommandContext(c, *storageE2EGinkgo, append(args, e2eArgs...)...)
	} else {
		args := append(e2eArgs, "-ginkgo.focus="+focus, "-ginkgo.skip="+storageE2ESkip,
			"-ginkgo.json-report="+report, "-ginkgo.no-color", "-ginkgo.timeout="+storageE2ETime.String())
		cmd = exec.CommandContext(c, *storageE2E, args...)
	}
	cmd.Dir = dir
	f, err := os.Create(logPath)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	// A failed spec makes the command fail; the report says which.
	runErr := cmd.Run()
	_, statErr := os.Stat(report)
	Expect(statErr).NotTo(HaveOccurred(), "e2e.test wrote no report (%v); log: %s", runErr, logPath)
	return report
}

// storageE2ESpec runs inside the pillar-csi container, after its first
// spec made the agent and the stores "thin" and "zvol" Ready (the driver
// definitions' classes name them) and the others left the chart installed.
func storageE2ESpec() {
	It("passes Kubernetes' external storage suite on LVM thin and ZFS", Label("storage-e2e"), func() {
		Expect(*storageE2E).NotTo(BeEmpty(), "-storage-e2e is required (scripts/e2e-kind.sh builds e2e.test)")
		Expect(*artifacts).NotTo(BeEmpty(), "-artifacts is required for the suite's report")
		c, cancel := context.WithTimeout(context.Background(), *storageE2ETime+5*time.Minute)
		defer cancel()
		start := time.Now()
		res := storageResults(runStorageE2E(c, *artifacts))
		table := storageTable(res, time.Since(start))
		GinkgoWriter.Print(table)
		fmt.Fprint(os.Stderr, table)
		if *storageE2EOut != "" {
			Expect(os.WriteFile(*storageE2EOut, []byte(table), 0o644)).To(Succeed())
		}
		var failed []string
		passed := map[string]int{}
		for _, r := range res {
			switch r.State {
			case "passed":
				passed[r.Driver]++
			case "skipped":
			default:
				failed = append(failed, r.Name+": "+r.Reason)
			}
		}
		Expect(failed).To(BeEmpty())
		Expect(passed).To(HaveKeyWithValue("pillar-lvm-thin", BeNumerically(">", 0)))
		Expect(passed).To(HaveKeyWithValue("pillar-zfs", BeNumerically(">", 0)))
	})
}
