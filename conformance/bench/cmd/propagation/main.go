// Command propagation measures how long a configuration change made through
// one replica takes to be enforced by another (PostgreSQL LISTEN/NOTIFY and
// snapshot swap), by flipping a principal on replica A and polling the proxy
// path of replica B.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

var token string

func admin(base, method, path string, body any) map[string]any {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		log.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	json.Unmarshal(b, &m)
	return m
}

func probe(proxy, key string) int {
	req, _ := http.NewRequest("POST", proxy+"/v1/messages", strings.NewReader(`{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func main() {
	adminA := flag.String("admin-a", "", "admin URL of replica A")
	proxyB := flag.String("proxy-b", "", "proxy URL of replica B")
	sim := flag.String("sim", "", "sim URL")
	simKey := flag.String("sim-key", "", "sim API key")
	n := flag.Int("n", 200, "changes to measure")
	out := flag.String("out", "", "markdown file to append to")
	flag.Parse()
	token = os.Getenv("PROXY_ADMIN_TOKEN")
	admin(*adminA, "POST", "/admin/v1/upstreams", map[string]any{"name": "sim", "kind": "vendor_api_key", "base_url": *sim, "api_key_value": *simKey})
	pr := admin(*adminA, "POST", "/admin/v1/principals", map[string]any{"name": "prop", "kind": "machine", "allowed_models": []string{"*"}})["id"].(string)
	key := admin(*adminA, "POST", "/admin/v1/principals/"+pr+"/keys", nil)["key"].(string)
	for probe(*proxyB, key) != 200 {
		time.Sleep(10 * time.Millisecond)
	}
	var ds []time.Duration
	for i := 0; i < *n; i++ {
		op, want := "disable", 403
		if i%2 == 1 {
			op, want = "enable", 200
		}
		start := time.Now()
		admin(*adminA, "POST", "/admin/v1/principals/"+pr+"/"+op, nil)
		for probe(*proxyB, key) != want {
			if time.Since(start) > 5*time.Second {
				log.Fatalf("change %d not seen by replica B after 5s", i)
			}
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p := func(q float64) time.Duration { return ds[int(float64(len(ds)-1)*q)] }
	ok := "yes"
	if p(0.99) > 100*time.Millisecond {
		ok = "**no**"
	}
	table := fmt.Sprintf("| changes | p50 | p99 | max | target p99 < 100 ms met |\n|---|---|---|---|---|\n| %d | %.1f ms | %.1f ms | %.1f ms | %s |\n",
		len(ds), ms(p(.5)), ms(p(.99)), ms(ds[len(ds)-1]), ok)
	fmt.Print(table)
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(f, "\n## Replica propagation (PostgreSQL)\n\nTime from an admin change committed through replica A to the first request on replica B that obeys it\n(the admin round trip included): LISTEN/NOTIFY, generation check, snapshot rebuild and swap.\n\n%s", table)
		f.Close()
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
