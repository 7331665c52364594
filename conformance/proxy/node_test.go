package proxy_test

import (
	"bytes"
	"os/exec"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// npmInstall installs testdata/<dir>'s npm client as its package-lock.json
// pins it, from npm's cache when it holds it.
func npmInstall(dir string) {
	GinkgoHelper()
	for _, tool := range []string{"node", "npm"} {
		_, err := exec.LookPath(tool)
		Expect(err).NotTo(HaveOccurred(), "%s is needed for the npm client in %s", tool, dir)
	}
	install := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
	install.Dir = dir
	out, err := install.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "npm ci in %s: %s", dir, out)
}

// runNode runs dir's client.mjs against the proxy at url with key; its
// output is the client's JSON report.
func runNode(dir, url, key string) []byte {
	GinkgoHelper()
	run := exec.Command("node", "client.mjs")
	run.Dir = dir
	run.Env = append(run.Environ(), "PROXY_URL="+url, "PROXY_KEY="+key)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	stdout, err := run.Output()
	Expect(err).NotTo(HaveOccurred(), "node client.mjs in %s: %s", dir, stderr.String())
	return stdout
}
