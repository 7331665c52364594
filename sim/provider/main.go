package provider

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"
)

type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }
func (k *keyList) Set(v string) error {
	if v == "" {
		return errors.New("empty key")
	}
	*k = append(*k, v)
	return nil
}

// Main runs bin/sim until ctx ends. Tests call it in-process; it prints the
// address it listens on to stderr once it accepts connections.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on (loopback unless --allow-remote)")
	var keys keyList
	fs.Var(&keys, "api-key", "accepted x-api-key, repeatable (default "+DefaultAPIKey+")")
	maxRecorded := fs.Int("max-recorded", defaultMaxRecorded, "requests kept for GET /_sim/requests; 0 turns recording off")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --listen address (the control API has no authentication)")
	tokenTTL := fs.Duration("oauth-token-ttl", defaultTokTTL, "lifetime of issued OAuth access tokens")
	awsKeys := map[string]string{}
	fs.Func("aws-key", "accepted Bedrock access key as ID:SECRET, repeatable (default "+DefaultAWSAccessKeyID+")", func(v string) error {
		id, secret, ok := strings.Cut(v, ":")
		if !ok || id == "" || secret == "" {
			return errors.New("want ID:SECRET")
		}
		awsKeys[id] = secret
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if host, _, err := net.SplitHostPort(*listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen: %w", err))
	} else if !*allowRemote && !isLoopback(host) {
		errs = append(errs, fmt.Errorf("--listen: %q is not a loopback address; pass --allow-remote to expose the sim", host))
	}
	if *maxRecorded < 0 {
		errs = append(errs, errors.New("--max-recorded: must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	o := Options{APIKeys: keys, MaxRecorded: *maxRecorded, OAuthTokenTTL: *tokenTTL, AWSKeys: awsKeys}
	if *maxRecorded == 0 {
		o.MaxRecorded = -1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: New(o), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(stderr, "sim: ", 0)}
	fmt.Fprintf(stderr, "sim listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			// Streams held open by injected delays do not hold up the exit.
			return srv.Close()
		}
		return nil
	case err := <-errc:
		return err
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
