// Package readme runs the README's quick start as a new user would paste
// it, against the provider simulator instead of Anthropic.
package readme_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestReadme(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "README quick start")
}

const simKey = "sk-sim-readme-upstream"

// quickStart returns the sh blocks of the README's "Quick start" section.
func quickStart() []string {
	b, err := os.ReadFile(filepath.Join(h.ModuleRoot(), "README.md"))
	Expect(err).NotTo(HaveOccurred())
	s := string(b)
	i := strings.Index(s, "\n## Quick start\n")
	Expect(i).To(BeNumerically(">=", 0), "README.md has no Quick start section")
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(s, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// freePort is a port for the README's proxy to listen on (see h.FreeAddr).
func freePort() string {
	_, port, err := net.SplitHostPort(h.FreeAddr())
	Expect(err).NotTo(HaveOccurred())
	return port
}

// shell runs a block with bash in dir; its whole process group is killed
// when the spec ends.
func shell(dir string, env []string, script string, out *bytes.Buffer) *exec.Cmd {
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

var _ = Describe("README quick start", func() {
	It("works pasted verbatim: the proxy in one shell, the admin calls and a request in another", func() {
		for _, tool := range []string{"bash", "curl", "jq"} {
			_, err := exec.LookPath(tool)
			Expect(err).NotTo(HaveOccurred(), "%s is needed (scripts/setup.sh installs it)", tool)
		}
		blocks := quickStart()
		Expect(blocks).To(HaveLen(2), "the quick start has two sh blocks: the proxy, then the admin calls")
		Expect(blocks[0]).To(ContainSubstring("make run"))

		sim := h.StartSim(simKey)
		work := GinkgoT().TempDir()
		// The shell's `make run` is the Makefile's recipe ($(BIN)/proxy
		// $(ARGS)) on the already built binary, in the user's directory;
		// the fixed ports are the only change made to the blocks, so the
		// spec does not collide with anything else on the machine, and the
		// shim allows the loopback simulator as the README tells a user to.
		proxyPort, adminPort := freePort(), freePort()
		shim := filepath.Join(work, "shim")
		Expect(os.MkdirAll(shim, 0o755)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(shim, "make"), []byte(fmt.Sprintf(`#!/usr/bin/env bash
set -e
args=()
for a in "$@"; do case $a in ARGS=*) read -ra args <<<"${a#ARGS=}";; run) ;; *) echo "make shim: only 'make run' is expected, got $a" >&2; exit 2;; esac; done
exec %q --proxy-listen 127.0.0.1:%s --admin-listen '[::1]:%s' --allow-private-upstreams "${args[@]}"
`, h.Bin("proxy"), proxyPort, adminPort)), 0o755)).To(Succeed())
		ports := strings.NewReplacer("localhost:8080", "localhost:"+proxyPort, "[::1]:9090", "[::1]:"+adminPort)
		env := []string{"PATH=" + shim + ":" + os.Getenv("PATH"), "HOME=" + work,
			"UPSTREAM_URL=" + sim.URL, "ANTHROPIC_API_KEY=" + simKey}

		var proxyOut bytes.Buffer
		shell(work, env, ports.Replace(blocks[0]), &proxyOut)
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Printf("\n----- shell 1 -----\n%s\n", strings.ReplaceAll(proxyOut.String(), simKey, "[REDACTED]"))
			}
		})
		Eventually(func() error {
			res, err := http.Get("http://[::1]:" + adminPort + "/admin/v1/status")
			if err == nil {
				res.Body.Close()
			}
			return err
		}, 60*time.Second, 100*time.Millisecond).Should(Succeed(), "the proxy of shell 1 did not start")

		var out bytes.Buffer
		second := shell(work, env, "set -euo pipefail\n"+ports.Replace(blocks[1]), &out)
		done := make(chan error, 1)
		go func() { done <- second.Wait() }()
		var err error
		Eventually(done, 90*time.Second).Should(Receive(&err))
		Expect(err).NotTo(HaveOccurred(), "shell 2:\n%s", out.String())
		// The admin calls answered, the key worked, the sim answered.
		Expect(out.String()).To(And(ContainSubstring(`"name": "anthropic"`), ContainSubstring(`"type": "text"`)), out.String())
		Expect(len(sim.Requests())).To(BeNumerically(">=", 1))
	})
})

var _ = Describe("the proxy's command line", func() {
	run := func(args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.Command(h.Bin("proxy"), args...)
		cmd.Dir = GinkgoT().TempDir()
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			Expect(err).NotTo(HaveOccurred())
		}
		return o.String(), e.String(), code
	}
	It("prints its version, its usage with subcommands and environment, and one line for a bad flag (exit 2)", func() {
		out, _, code := run("--version")
		Expect(code).To(Equal(0))
		Expect(out).To(MatchRegexp(`^proxy \S+\n$`))

		_, errOut, code := run("--help")
		Expect(code).To(Equal(0))
		Expect(errOut).To(And(ContainSubstring("proxy storage rotate-master-key"), ContainSubstring("PROXY_MASTER_KEY"),
			ContainSubstring("PROXY_UPSTREAM_KEY_*"), ContainSubstring("-database-url")))

		_, errOut, code = run("--no-such-flag")
		Expect(code).To(Equal(2))
		Expect(strings.Count(errOut, "\n")).To(Equal(1), errOut)
		Expect(errOut).To(ContainSubstring("no-such-flag"))

		// A SQLite path whose directory is missing is refused; nothing is made.
		dir := filepath.Join(GinkgoT().TempDir(), "missing")
		_, errOut, code = run("--database-url", "sqlite://"+dir+"/x.db", "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
		Expect(code).NotTo(Equal(0))
		Expect(errOut).To(And(ContainSubstring("database_url"), ContainSubstring(dir)))
		Expect(dir).NotTo(BeADirectory())
	})
})
