package server

import (
	"net/http"
	"net/http/pprof"
)

// pprofPath is where the profiling endpoint is mounted on the admin
// listener (net/http/pprof's index links assume this prefix).
const pprofPath = "/debug/pprof/"

// pprofHandler serves the Go runtime's profiles (CPU, heap, goroutines,
// execution trace, …) for `go tool pprof`. It is mounted only when
// debug.pprof is on, and only on the admin listener behind the admin
// token: a profile reveals code paths and, through the goroutine dump,
// request state, and a CPU profile or trace costs CPU while it runs.
//
// /debug/pprof/cmdline is left out on purpose: it prints the process's
// arguments, where a --database-url may carry a password.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pprofPath, pprof.Index) // the index and every named profile (heap, goroutine, allocs, …)
	mux.HandleFunc("GET "+pprofPath+"profile", pprof.Profile)
	mux.HandleFunc("GET "+pprofPath+"trace", pprof.Trace)
	mux.HandleFunc("GET "+pprofPath+"symbol", pprof.Symbol)
	mux.HandleFunc("POST "+pprofPath+"symbol", pprof.Symbol) // go tool pprof posts addresses to resolve
	mux.HandleFunc("GET "+pprofPath+"cmdline", http.NotFound)
	return mux
}
