package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/server"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/store/postgres"
)

// keyJSON is the --json form of an API key record (never the key itself,
// except once in the output of create).
type keyJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Team       string     `json:"team"`
	Mask       string     `json:"mask"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	RevokedAt  *time.Time `json:"revokedAt"`
	Key        string     `json:"key,omitempty"`
}

func toKeyJSON(k store.APIKey) keyJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return keyJSON{ID: k.ID, Name: k.Name, Team: k.Team, Mask: k.Mask, CreatedAt: k.CreatedAt, LastUsedAt: opt(k.LastUsedAt), RevokedAt: opt(k.RevokedAt)}
}

// newKeysCmd is `cubby keys`: API keys are managed on the server host, in the
// server's database, because the E2B API has no endpoint for them.
func newKeysCmd() *cobra.Command {
	var loc keysLocation
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys (on the server host)",
		Long: `Manage the API keys of a Cubby server. There is no API endpoint for keys: run
these commands on the server host, as a user that can write the server's data
directory (--data-dir, as given to cubby serve). They take effect at once, also
while the server runs. A new key is printed once; only its hash is stored.

Every key belongs to a team (--team, default "default", the team of CUBBY_API_KEY).
A sandbox belongs to the team of the key that created it: keys of other teams
can neither see nor touch it, and limits (cubby serve --team-max-*) count per team.

Replicas of --backend kubernetes share their keys in PostgreSQL: pass the same
--store postgres://… instead of --data-dir, from anywhere that reaches it.`,
	}
	cmd.PersistentFlags().StringVar(&loc.dataDir, "data-dir", server.DefaultDataDir, "server data directory (holds cubby.db)")
	cmd.PersistentFlags().StringVar(&loc.store, "store", "", "the servers' PostgreSQL (postgres://…), as given to cubby serve --store (default $"+storeEnv+"); replaces --data-dir")
	cmd.AddCommand(newKeysCreateCmd(&loc), newKeysListCmd(&loc), newKeysRevokeCmd(&loc))
	return cmd
}

// keysLocation is where the keys live: a data dir's SQLite database, or a
// PostgreSQL store when store is set.
type keysLocation struct {
	dataDir, store string
}

// withKeys opens the keys' store at loc and runs f with a control plane that
// can only manage keys. create allows creating a missing SQLite database.
func withKeys(ctx context.Context, loc keysLocation, create bool, f func(*controlplane.Service) error) error {
	if loc.store == "" {
		loc.store = os.Getenv(storeEnv)
	}
	if loc.store != "" {
		db, err := postgres.Open(ctx, loc.store)
		if err != nil {
			return err
		}
		defer db.Close()
		return withKeyService(ctx, db, f)
	}
	dataDir := loc.dataDir
	st, err := os.Stat(dataDir)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("data directory %s not found: pass the --data-dir given to cubby serve", dataDir)
	}
	dbPath := filepath.Join(dataDir, "cubby.db")
	if _, err := os.Stat(dbPath); err != nil && !create {
		return fmt.Errorf("no Cubby database at %s: pass the --data-dir given to cubby serve", dbPath)
	}
	db, err := store.Open(ctx, dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	return withKeyService(ctx, db, f)
}

// withKeyService runs f with a key-management control plane on st.
func withKeyService(ctx context.Context, st controlplane.Store, f func(*controlplane.Service) error) error {
	svc, err := controlplane.New(controlplane.Config{}, controlplane.Deps{Store: st})
	if err != nil {
		return err
	}
	defer func() { _ = svc.Shutdown(context.WithoutCancel(ctx)) }()
	return f(svc)
}

func newKeysCreateCmd(loc *keysLocation) *cobra.Command {
	var name, team string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key and print it (shown only this once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKeys(cmd.Context(), *loc, true, func(svc *controlplane.Service) error {
				key, rec, err := svc.CreateTeamAPIKey(cmd.Context(), name, team)
				if err != nil {
					return err
				}
				if asJSON {
					kj := toKeyJSON(rec)
					kj.Key = key
					return writeJSON(cmd.OutOrStdout(), kj)
				}
				fmt.Fprintln(cmd.OutOrStdout(), key)
				fmt.Fprintf(cmd.ErrOrStderr(), "API key %s (%s, team %s) created; it is shown only now: export E2B_API_KEY=%s\n", rec.ID, rec.Name, rec.Team, key)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "cli", "name of the key, for your records")
	cmd.Flags().StringVar(&team, "team", store.DefaultTeam, "team the key acts for (created when new): lowercase letters, digits, '_' and '-'")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (including the key)")
	return cmd
}

func newKeysListCmd(loc *keysLocation) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API keys (masked), revoked ones included",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKeys(cmd.Context(), *loc, false, func(svc *controlplane.Service) error {
				keys, err := svc.ListAPIKeys(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]keyJSON, len(keys))
					for i, k := range keys {
						out[i] = toKeyJSON(k)
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tTEAM\tKEY\tCREATED\tLAST USED\tREVOKED")
				for _, k := range keys {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Team, k.Mask, shortTime(k.CreatedAt),
						shortTime(k.LastUsedAt), shortTime(k.RevokedAt))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newKeysRevokeCmd(loc *keysLocation) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke <key-id>",
		Short: "Revoke an API key; it stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKeys(cmd.Context(), *loc, false, func(svc *controlplane.Service) error {
				err := svc.RevokeAPIKey(cmd.Context(), args[0])
				if errors.Is(err, controlplane.ErrKeyNotFound) {
					return fmt.Errorf("no API key with ID %s: `cubby keys list` shows the IDs", args[0])
				}
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "revoked", args[0])
				return nil
			})
		},
	}
}
