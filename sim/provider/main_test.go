package provider

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
)

// Main serves until its context ends, on the address it prints.
func TestMainServes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"--listen", "127.0.0.1:0", "--api-key", "k1", "--api-key", "k2", "--max-recorded", "0"}, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr) // keep later server logs from blocking
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "sim listening on ")
	if !ok {
		t.Fatalf("banner %q", line)
	}
	url := "http://" + addr
	body := `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`
	for key, status := range map[string]int{"k1": 200, "k2": 200, DefaultAPIKey: 401} {
		if res, b := post(t, url+"/v1/messages", body, map[string]string{"x-api-key": key}); res.StatusCode != status {
			t.Fatalf("%s: %d %s", key, res.StatusCode, b)
		}
	}
	if got := control(t, url, "GET", "/_sim/requests", ""); got != "[]" {
		t.Fatalf("--max-recorded 0 still records: %s", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Flag problems are reported together, and the sim refuses to expose its
// unauthenticated control API beyond loopback unless told to.
func TestMainFlagErrors(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := Main(context.Background(), []string{"--listen", "0.0.0.0:0", "--max-recorded", "-1", "extra"}, &out)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"--allow-remote", "--max-recorded", "unexpected arguments: extra"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := Main(context.Background(), []string{"--listen", "nonsense"}, &out); err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Errorf("bad address: %v", err)
	}
	if err := Main(context.Background(), []string{"--api-key", ""}, &out); err == nil {
		t.Error("empty key accepted")
	}
	for host, want := range map[string]bool{"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true, "": false, "0.0.0.0": false, "::": false, "10.0.0.1": false} {
		if isLoopback(host) != want {
			t.Errorf("isLoopback(%q) != %v", host, want)
		}
	}
}
