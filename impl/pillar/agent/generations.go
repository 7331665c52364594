package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/pillarhq/pillar/impl/atomicfile"
)

// generationsFile is the file under the state directory that holds the
// exports' generations.
const generationsFile = "generations.json"

// generations are the exports' publication generations by subsystem NQN
// (see Server.checkGeneration). They are kept in a file under the agent's
// state directory, written before the change they count reaches the
// target, so an agent restarted between a newer request and a stale one
// still refuses the stale one. Without a directory they live in memory
// only, as they did before.
type generations struct {
	mu   sync.Mutex
	path string
	m    map[string]uint64
}

type generationsDoc struct {
	Version     int               `json:"version"`
	Generations map[string]uint64 `json:"generations"`
}

// loadGenerations reads dir's generations file; a missing file is an
// agent that never changed an export. A file it cannot read stops the
// agent: starting from zero would accept exactly the stale requests the
// file is there to refuse.
func loadGenerations(dir string) (*generations, error) {
	g := &generations{m: map[string]uint64{}}
	if dir == "" {
		return g, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	g.path = filepath.Join(dir, generationsFile)
	b, err := os.ReadFile(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	var doc generationsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--state-dir: %s is not the agent's generations file (move it away to start over, accepting stale requests once): %w", g.path, err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("--state-dir: %s has version %d, this agent reads version 1", g.path, doc.Version)
	}
	maps.Copy(g.m, doc.Generations)
	return g, nil
}

func (g *generations) get(nqn string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[nqn]
}

func (g *generations) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}

// advance sets nqn's generation one past the larger of its own and the
// caller's, on disk first: when the file cannot be written nothing
// changes and the error is returned.
func (g *generations) advance(nqn string, caller uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := max(g.m[nqn], caller) + 1
	return g.set(nqn, next)
}

// forget drops nqn's generation (its volume is deleted).
func (g *generations) forget(nqn string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.m[nqn]; !ok {
		return nil
	}
	return g.set(nqn, 0)
}

// set changes one entry (0 removes it) and writes the file; called with
// mu held.
func (g *generations) set(nqn string, gen uint64) error {
	m := maps.Clone(g.m)
	if gen == 0 {
		delete(m, nqn)
	} else {
		m[nqn] = gen
	}
	if g.path != "" {
		if err := writeFileAtomic(g.path, generationsDoc{Version: 1, Generations: m}); err != nil {
			return fmt.Errorf("record the export's generation: %w", err)
		}
	}
	g.m = m
	return nil
}

// writeFileAtomic replaces path with v's JSON; a crash leaves the old
// file or the new one, never a part.
func writeFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
