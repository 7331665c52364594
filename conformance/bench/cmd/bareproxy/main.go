// Command bareproxy is the benchmark's baseline: a plain
// httputil.ReverseProxy to one upstream with the relay's transport settings,
// so the comparison isolates what the gateway adds.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/pillarhq/pillar/impl/gateway/relay"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	target := flag.String("target", "", "upstream base URL")
	key := flag.String("api-key", "", "x-api-key to send upstream")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || *target == "" {
		log.Fatal("--target URL required")
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Set("X-Api-Key", *key)
		},
		Transport:     relay.NewTransport(),
		FlushInterval: -1, // flush every write, as the relay does for streams
	}
	log.Fatal(http.ListenAndServe(*listen, rp))
}
