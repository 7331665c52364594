// Command bareproxy is the benchmark's baseline: a stock
// httputil.ReverseProxy to one upstream (bench.NewBareProxy), run as its own
// process like bin/proxy so both paths have the same process model.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() { bench.Main("bareproxy", run) }

func run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("bareproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	target := fs.String("target", "", "upstream base URL, e.g. http://127.0.0.1:8089")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The upstream key comes from the environment, not argv, so it does not
	// show in the process list.
	key := os.Getenv("BAREPROXY_API_KEY")
	u, err := url.Parse(*target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("--target: need an absolute URL, got %q", *target)
	}
	if key == "" {
		return fmt.Errorf("BAREPROXY_API_KEY is not set")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return bench.NewServer(bench.NewBareProxy(u, key, nil)).Serve(ln)
}
