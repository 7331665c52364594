// Package otlptest is a real OTLP trace receiver for tests: the OTLP
// protobuf service over gRPC and the OTLP/HTTP protobuf endpoint, both on
// loopback, decoding what an exporter sends into Spans a test can assert
// as a tree. An SDK exporter feeding the same Collector serves unit tests.
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// TB is the part of testing.TB the receiver needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Span is one received span, its values as text.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      string // server, client, internal, producer, consumer
	Start                     time.Time
	Attrs                     map[string]string
	Events                    []Event
	Error                     bool   // status code error
	StatusMessage             string // the error status's description
	Resource                  map[string]string
}

// Event is a span event.
type Event struct {
	Name  string
	Attrs map[string]string
}

// Collector holds what was received.
type Collector struct {
	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced on every add
	// Requests counts export requests received.
	requests  int
	count     int
	countOnly bool
}

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{changed: make(chan struct{})} }

// NewCounter returns a collector that keeps only the count of what it
// receives (benchmarks: memory stays flat however many spans arrive).
func NewCounter() *Collector { return &Collector{changed: make(chan struct{}), countOnly: true} }

// Count is how many spans were received.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

func (c *Collector) add(spans []Span) {
	c.mu.Lock()
	c.count += len(spans)
	if !c.countOnly {
		c.spans = append(c.spans, spans...)
	}
	c.requests++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// WaitFor returns the spans once done says they are complete, failing the
// test if they are not within a minute (an exporter batches: the wait is
// on arrivals, the bound only ends a test that would hang).
func (c *Collector) WaitFor(t TB, done func([]Span) bool) []Span {
	t.Helper()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	for {
		c.mu.Lock()
		spans, changed := append([]Span(nil), c.spans...), c.changed
		c.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("spans not complete after a minute; received:\n%s", Tree(spans))
			return nil
		}
	}
}

// WaitForTrace waits for a span named root and returns its trace once it
// has n spans.
func (c *Collector) WaitForTrace(t TB, root string, n int) []Span {
	t.Helper()
	var out []Span
	c.WaitFor(t, func(all []Span) bool {
		for _, s := range all {
			if s.Name == root {
				out = Trace(all, s.TraceID)
				return len(out) >= n
			}
		}
		return false
	})
	return out
}

// WaitForTraceID returns the spans of trace traceID once there are n.
func (c *Collector) WaitForTraceID(t TB, traceID string, n int) []Span {
	t.Helper()
	var out []Span
	c.WaitFor(t, func(all []Span) bool {
		out = Trace(all, traceID)
		return len(out) >= n
	})
	return out
}

// Trace is the spans of one trace.
func Trace(spans []Span, traceID string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Find returns the first span named name.
func Find(spans []Span, name string) (Span, bool) {
	for _, s := range spans {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}

// Tree renders spans as an indented tree, children in start order, each
// line the span's name, kind, "error" when its status is, and the listed
// attributes and events present on it. A span whose parent is not among
// them is a root.
func Tree(spans []Span, keys ...string) string {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	children := map[string][]Span{}
	for _, s := range spans {
		p := s.ParentID
		if !ids[p] {
			p = ""
		}
		children[p] = append(children[p], s)
	}
	for _, c := range children {
		sort.SliceStable(c, func(i, j int) bool { return c[i].Start.Before(c[j].Start) })
	}
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range children[parent] {
			b.WriteString(strings.Repeat("  ", depth))
			b.WriteString(s.Name + " (" + s.Kind + ")")
			if s.Error {
				b.WriteString(" error")
			}
			for _, k := range keys {
				if v, ok := s.Attrs[k]; ok {
					b.WriteString(" " + k + "=" + v)
				}
			}
			for _, e := range s.Events {
				b.WriteString(" [" + e.Name)
				for _, k := range keys {
					if v, ok := e.Attrs[k]; ok {
						b.WriteString(" " + k + "=" + v)
					}
				}
				b.WriteString("]")
			}
			b.WriteString("\n")
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

// ---- the receivers ----

// StartGRPC serves the OTLP trace service on a loopback port until the
// test ends and returns its endpoint URL (http://127.0.0.1:port).
func StartGRPC(t TB, c *Collector) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlp grpc listen: %v", err)
	}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, &grpcService{c: c})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return "http://" + l.Addr().String()
}

type grpcService struct {
	collectortrace.UnimplementedTraceServiceServer
	c *Collector
}

func (g *grpcService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.c.add(fromProto(req))
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// StartHTTP serves OTLP/HTTP (protobuf) at /v1/traces on a loopback port
// until the test ends and returns its base URL.
func StartHTTP(t TB, c *Collector) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlp http listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(fromProto(&req))
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func fromProto(req *collectortrace.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		res := protoAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(),
					Kind:  strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), Attrs: protoAttrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, StatusMessage: s.GetStatus().GetMessage(), Resource: res,
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Attrs: protoAttrs(e.GetAttributes())})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func protoAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		var s string
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			s = x.StringValue
		case *commonpb.AnyValue_IntValue:
			s = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_DoubleValue:
			s = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		case *commonpb.AnyValue_BoolValue:
			s = strconv.FormatBool(x.BoolValue)
		default:
			s = fmt.Sprint(v)
		}
		m[kv.GetKey()] = s
	}
	return m
}

// ---- the SDK exporter of unit tests ----

// Exporter is an SDK span exporter into c, converting as the receivers do.
func Exporter(c *Collector) sdktrace.SpanExporter { return sdkExporter{c} }

type sdkExporter struct{ c *Collector }

func (e sdkExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]Span, 0, len(spans))
	for _, s := range spans {
		sp := Span{
			TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			Name: s.Name(), Kind: kindName(s.SpanKind()), Start: s.StartTime(), Attrs: sdkAttrs(s.Attributes()),
			Error: s.Status().Code == codes.Error, StatusMessage: s.Status().Description, Resource: sdkAttrs(s.Resource().Attributes()),
		}
		if p := s.Parent(); p.IsValid() {
			sp.ParentID = p.SpanID().String()
		}
		for _, e := range s.Events() {
			sp.Events = append(sp.Events, Event{Name: e.Name, Attrs: sdkAttrs(e.Attributes)})
		}
		out = append(out, sp)
	}
	e.c.add(out)
	return nil
}

func (sdkExporter) Shutdown(context.Context) error { return nil }

func kindName(k trace.SpanKind) string {
	switch k {
	case trace.SpanKindServer:
		return "server"
	case trace.SpanKindClient:
		return "client"
	case trace.SpanKindProducer:
		return "producer"
	case trace.SpanKindConsumer:
		return "consumer"
	}
	return "internal"
}

func sdkAttrs(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}
