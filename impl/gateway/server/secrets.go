package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/sso"
)

// secrets are what start reads before it touches the database, so a
// missing or malformed one changes nothing.
type secrets struct {
	box          *secret.Box
	auth         []admin.Authenticator
	metricsToken string
	// signIn serves /auth/ when OIDC is configured.
	signIn http.Handler
	// keyNote and tokenNote say where the master key and the admin token
	// came from, for the start-up banner (never the values).
	keyNote, tokenNote string
}

func loadSecrets(cfg *Config, getenv func(string) string) (*secrets, error) {
	key, keyNote, err := masterKey(cfg.db, getenv)
	if err != nil {
		return nil, err
	}
	box, err := secret.New(key)
	if err != nil {
		return nil, err
	}
	auth, tokenNote, err := adminAuth(cfg, getenv)
	if err != nil {
		return nil, err
	}
	metricsToken, err := scrapeToken(getenv)
	if err != nil {
		return nil, err
	}
	return &secrets{box: box, auth: auth, metricsToken: metricsToken, keyNote: keyNote, tokenNote: tokenNote}, nil
}

// masterKey returns the AEAD master key: PROXY_MASTER_KEY, or on the embedded
// default a key file beside the database, created with mode 0600.
func masterKey(db DatabaseURL, getenv func(string) string) ([]byte, string, error) {
	if v := getenv("PROXY_MASTER_KEY"); v != "" {
		k, err := secret.ParseKey(v)
		if err != nil {
			return nil, "", fmt.Errorf("PROXY_MASTER_KEY: %w", err)
		}
		return k, "from $PROXY_MASTER_KEY", nil
	}
	path, ok := db.fileBeside(".key")
	if !ok {
		return nil, "", errors.New("PROXY_MASTER_KEY is required with PostgreSQL: every replica must share one master key (32 bytes, hex or base64)")
	}
	k, created, err := secret.LoadOrCreateKeyFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("master key file: %w", err)
	}
	note := "in " + path + " (mode 0600; back it up: credentials cannot be decrypted without it)"
	if created {
		note = "generated into " + path + " (mode 0600; back it up: credentials cannot be decrypted without it)"
	}
	return k, note, nil
}

// adminAuth builds the admin authentication providers. Without configured
// providers a static token comes from PROXY_ADMIN_TOKEN; on the embedded
// default, absent that, a token file beside the database.
func adminAuth(cfg *Config, getenv func(string) string) ([]admin.Authenticator, string, error) {
	if b := cfg.Admin.Auth.BreakGlass; b != nil && !*b {
		return nil, "off (admin.auth.break_glass: false; scoped tokens and OIDC only)", nil
	}
	var out []admin.Authenticator
	var notes []string
	for i, p := range cfg.Admin.Auth.Providers {
		tok := getenv(p.TokenEnv)
		if tok == "" {
			return nil, "", fmt.Errorf("admin.auth.providers[%d]: environment variable %s is empty", i, p.TokenEnv)
		}
		out = append(out, admin.StaticToken{Token: tok})
		notes = append(notes, "from $"+p.TokenEnv)
	}
	if len(out) > 0 {
		return out, strings.Join(notes, ", "), nil
	}
	if tok := getenv("PROXY_ADMIN_TOKEN"); tok != "" {
		return []admin.Authenticator{admin.StaticToken{Token: tok}}, "from $PROXY_ADMIN_TOKEN", nil
	}
	path, ok := cfg.db.fileBeside(".admin-token")
	if !ok {
		return nil, "", errors.New("no admin token: set PROXY_ADMIN_TOKEN or configure admin.auth.providers")
	}
	data, err := secret.ReadSecretFile(path)
	tok := strings.TrimSpace(string(data))
	if errors.Is(err, os.ErrNotExist) || (err == nil && tok == "") {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, "", err
		}
		tok = "adm-" + base64.RawURLEncoding.EncodeToString(b)
		if err := secret.WriteFileAtomic(path, []byte(tok+"\n")); err != nil {
			return nil, "", fmt.Errorf("admin token file: %w", err)
		}
	} else if err != nil {
		return nil, "", fmt.Errorf("admin token file: %w", err)
	}
	abs, _ := filepath.Abs(path)
	return []admin.Authenticator{admin.StaticToken{Token: tok}}, "in " + abs + ` (export PROXY_ADMIN_TOKEN="$(cat ` + path + `)")`, nil
}

// scrapeToken is the read-only credential of /metrics: PROXY_METRICS_TOKEN,
// or the contents of the file PROXY_METRICS_TOKEN_FILE names (mode 0600 or
// stricter). Empty: /metrics takes only the admin token.
func scrapeToken(getenv func(string) string) (string, error) {
	if v := getenv("PROXY_METRICS_TOKEN"); v != "" {
		return strings.TrimSpace(v), nil
	}
	path := getenv("PROXY_METRICS_TOKEN_FILE")
	if path == "" {
		return "", nil
	}
	data, err := secret.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("PROXY_METRICS_TOKEN_FILE: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("PROXY_METRICS_TOKEN_FILE: %s is empty", path)
	}
	return tok, nil
}

func metricsNote(tok string) string {
	if tok == "" {
		return "none set"
	}
	return "set"
}

// reservedEnv are the variables api_key_env may never name besides PROXY_*:
// the ones holding admin tokens, which an upstream's credential must never
// carry to a provider (docs/operations.md, "api_key_env").
func reservedEnv(cfg *Config) []string {
	var out []string
	for _, p := range cfg.Admin.Auth.Providers {
		out = append(out, p.TokenEnv)
	}
	if o := cfg.Admin.Auth.OIDC; o != nil {
		out = append(out, o.ClientSecretEnv)
	}
	return out
}

// startSignIn reads the OIDC issuer's discovery document and adds its
// sign-in and access tokens to the admin API's providers. An unreachable
// issuer fails the start: an operator who turned the break-glass token off
// would otherwise have no way in.
func (sec *secrets) startSignIn(ctx context.Context, cfg *Config, getenv func(string) string, log *slog.Logger) error {
	o := cfg.Admin.Auth.OIDC
	if o == nil {
		return nil
	}
	c := *o
	c.ClientSecret = getenv(c.ClientSecretEnv)
	if c.ClientSecret == "" {
		return fmt.Errorf("admin.auth.oidc.client_secret_env: environment variable %s is empty", c.ClientSecretEnv)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := sso.New(dctx, c, sso.Options{Logger: log.With("component", "sso"), Clock: cfg.clock})
	if err != nil {
		return err
	}
	sec.auth = append(sec.auth, s)
	sec.signIn = s.Handler()
	if sec.tokenNote != "" {
		sec.tokenNote += "; "
	}
	sec.tokenNote += "sign-in through " + c.Issuer
	return nil
}
