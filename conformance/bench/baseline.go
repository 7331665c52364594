package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/relay"
)

// NewBareProxy returns the baseline the gateway is measured against: a stock
// httputil.ReverseProxy to target that only sets the upstream's x-api-key.
// transport nil means relay.NewTransport(), so both paths hold the same idle
// connections to the provider.
//
// It gets what the relay has, so that only the gateway's own work is
// measured: copy buffers from a pool, and the request body read into memory
// before ReverseProxy sees it, as the relay reads it to find the model.
// Streaming the body instead is no usable baseline: net/http's server
// closes the request body when the response headers go out, the transport
// then reads it once more to check its length, fails, and drops the
// upstream connection mid-stream (golang/go#40747); and it writes the
// request headers and the body separately, where a body in memory goes out
// in one write.
func NewBareProxy(target *url.URL, apiKey string, transport http.RoundTripper) http.Handler {
	if transport == nil {
		transport = relay.NewTransport()
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("X-Api-Key", apiKey)
		},
		Transport:  transport,
		BufferPool: copyBuffers{},
		// FlushInterval stays 0: ReverseProxy already flushes every write of
		// a text/event-stream response, as the relay does.
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, relay.MaxBodyBytes+1))
		if err != nil || len(b) > relay.MaxBodyBytes {
			http.Error(w, "cannot read request body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	})
}

// NewServer wraps h in an http.Server with the timeouts bin/proxy gives its
// proxy listener (impl/gateway/server), so both paths pay the same
// per-connection deadline bookkeeping.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
}

// copyBuffers pools ReverseProxy's 32 KB copy buffers, as the relay pools
// its own; without it the baseline allocates one per request.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
