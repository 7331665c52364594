package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// rebindCredentials re-seals, under the same master key, every upstream
// credential still sealed without its origins (credential.LegacyAD) bound
// to the origins its row names now, so it keeps working there and nowhere
// else. It runs at start-up before the first snapshot; a credential that
// opens neither way (another key, another origin) is left for the snapshot
// to report.
func rebindCredentials(ctx context.Context, st store.SealedStore, box *secret.Box, log *slog.Logger) error {
	n, err := st.RebindUpstreamCredentials(store.WithActor(ctx, "proxy-start"), func(v store.Sealed) ([]byte, error) {
		ad := credential.AD(v.UpstreamID, v.UpstreamKind, v.BaseURL, v.OAuthTokenURL)
		if _, err := box.Open(v.Ciphertext, ad); err == nil {
			return nil, nil
		}
		pt, err := box.Open(v.Ciphertext, credential.LegacyAD(v.UpstreamID))
		if err != nil {
			return nil, nil
		}
		return box.Seal(pt, ad)
	})
	if err != nil {
		return fmt.Errorf("bind stored upstream credentials to their origins: %w", err)
	}
	if n > 0 {
		log.Info("upstream credentials bound to their origins", "count", n)
	}
	return nil
}
