// Package pricing installs the price catalog on each replica. Fetching is
// durable, cross-replica work (the price_catalog_fetch job stores it once);
// installation is local and per replica: each polls the stored version and
// swaps its in-memory copy, so request-path readers never wait.
package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Price is one model's prices in USD per million tokens.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheWrite float64 `json:"cache_write"`
	CacheRead  float64 `json:"cache_read"`
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
	st  Getter
	log *slog.Logger
	now func() time.Time
	cur atomic.Pointer[Catalog]
}

// NewInstaller returns an installer with nothing installed.
func NewInstaller(st Getter, log *slog.Logger, now func() time.Time) *Installer {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Installer{st: st, log: log, now: now}
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
	var doc struct {
		Models map[string]Price `json:"models"`
	}
	if err := json.Unmarshal(c.Body, &doc); err != nil {
		return false, err
	}
	i.cur.Store(&Catalog{Version: c.Version, InstalledAt: i.now(), Models: doc.Models, Body: c.Body})
	i.log.Info("price catalog installed", "version", c.Version, "models", len(doc.Models))
	return true, nil
}

// Run syncs every interval until ctx ends.
func (i *Installer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := i.Sync(ctx); err != nil && ctx.Err() == nil {
			i.log.Warn("price catalog install", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
