// Package pricing installs the price catalog on each replica. Fetching is
// durable, cross-replica work (the price_catalog_fetch job stores it once);
// installation is local and per replica: each polls the stored version and
// swaps its in-memory copy, so request-path readers never wait.
package pricing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Price is one model's prices per token, read exactly from the catalog's
// USD-per-million-tokens numbers (see money.Rate).
type Price struct {
	Input  money.Rate
	Output money.Rate
	// CacheWrite is the 5-minute cache write, CacheWrite1h the 1-hour one.
	CacheWrite   money.Rate
	CacheWrite1h money.Rate
	CacheRead    money.Rate
}

// Catalog is an installed price catalog.
type Catalog struct {
	Version     string
	InstalledAt time.Time
	Models      map[string]Price
	Body        json.RawMessage
}

// Getter reads the stored catalog.
type Getter interface {
	GetPriceCatalog(ctx context.Context) (*store.PriceCatalog, error)
}

// Installer keeps the local copy current.
type Installer struct {
	service.Base
	st  Getter
	cur atomic.Pointer[Catalog]
}

// NewInstaller returns an installer with nothing installed.
func NewInstaller(st Getter, o service.Options) *Installer {
	return service.Init(o, &Installer{st: st})
}

// Current returns the installed catalog, or nil.
func (i *Installer) Current() *Catalog { return i.cur.Load() }

// Sync installs the stored catalog when its version differs.
func (i *Installer) Sync(ctx context.Context) (bool, error) {
	c, err := i.st.GetPriceCatalog(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cur := i.cur.Load(); cur != nil && cur.Version == c.Version {
		return false, nil
	}
	models, skipped, err := parseModels(c.Body)
	if err != nil {
		return false, err
	}
	i.cur.Store(&Catalog{Version: c.Version, InstalledAt: i.Clock.Now(), Models: models, Body: c.Body})
	i.Logger.Info("price catalog installed", "version", c.Version, "models", len(models))
	if len(skipped) > 0 {
		// Those models' requests are recorded without a cost.
		i.Logger.Warn("price catalog entries without a usable input or output price", "version", c.Version, "models", skipped)
	}
	return true, nil
}

// Run syncs every interval until ctx ends.
func (i *Installer) Run(ctx context.Context, interval time.Duration) {
	install := func(ctx context.Context) {
		if _, err := i.Sync(ctx); err != nil && ctx.Err() == nil {
			i.Logger.Warn("price catalog install", "error", err)
		}
	}
	install(ctx)
	service.Every(ctx, i.Clock, interval, install)
}

// parseModels reads the catalog's models exactly (numbers as text, never
// through float64). input and output are required; a missing cache price
// takes Anthropic's published multiple of the input price: 1.25× for a
// 5-minute cache write, 2× for a 1-hour one, 0.1× for a cache read.
func parseModels(body []byte) (map[string]Price, []string, error) {
	var doc struct {
		Models map[string]map[string]json.Number `json:"models"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, err
	}
	out := make(map[string]Price, len(doc.Models))
	var skipped []string
	for model, fields := range doc.Models {
		rate := func(name string) (money.Rate, bool) {
			n, ok := fields[name]
			if !ok {
				return 0, false
			}
			r, err := money.RateFromPerMillion(n.String())
			return r, err == nil
		}
		in, okIn := rate("input")
		outp, okOut := rate("output")
		if !okIn || !okOut {
			skipped = append(skipped, model)
			continue
		}
		p := Price{Input: in, Output: outp}
		var ok bool
		if p.CacheWrite, ok = rate("cache_write"); !ok {
			p.CacheWrite = in * 5 / 4
		}
		if p.CacheWrite1h, ok = rate("cache_write_1h"); !ok {
			p.CacheWrite1h = in * 2
		}
		if p.CacheRead, ok = rate("cache_read"); !ok {
			p.CacheRead = in / 10
		}
		out[model] = p
	}
	slices.Sort(skipped)
	return out, skipped, nil
}

// Tokens are a request's billed token counts by class.
type Tokens struct {
	Input  int64
	Output int64
	// CacheWrite is every cache-creation token; CacheWrite1h the part of
	// it written with the 1-hour TTL (the rest is 5-minute).
	CacheWrite   int64
	CacheWrite1h int64
	CacheRead    int64
}

// Cost prices t at p, summed in pico-dollars and rounded to nano-dollars
// once.
func (p Price) Cost(t Tokens) money.Nanos {
	w1h := min(max(t.CacheWrite1h, 0), max(t.CacheWrite, 0))
	w5m := max(t.CacheWrite, 0) - w1h
	sum := p.Input.Cost(max(t.Input, 0)) + p.Output.Cost(max(t.Output, 0)) + p.CacheWrite.Cost(w5m) +
		p.CacheWrite1h.Cost(w1h) + p.CacheRead.Cost(max(t.CacheRead, 0))
	return sum.Nanos()
}

// Cost prices a request of model under c. ok is false when c is nil or
// does not price the model: the cost is then unknown, not zero.
func (c *Catalog) Cost(model string, t Tokens) (cost money.Nanos, ok bool) {
	if c == nil {
		return 0, false
	}
	p, ok := c.Models[model]
	if !ok {
		return 0, false
	}
	return p.Cost(t), true
}
