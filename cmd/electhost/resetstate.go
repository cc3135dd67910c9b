package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/spf13/cobra"
)

func newResetStateCmd() *cobra.Command {
	var group, id, stateDir string
	c := &cobra.Command{
		Use:   "reset-state --group G [--id ID] [--state-dir DIR]",
		Short: "Forget this member's saved term and vote in a group (after a corrupt or lost state file)",
		Long: `reset-state deletes the saved term and vote of agent --id in group G from
its state directory, so that "electhost run" starts it from term 0. run
refuses a state file that is corrupt or missing after it was saved, because
a member that forgets its vote can vote twice in one term; reset it only
when that cannot matter: the other members have moved to a later term (a
running group has), or the whole group restarts from scratch. The agent must
be stopped (its state directory is locked while it runs).

A corrupt state manifest (the directory's list of the states ever saved)
is rebuilt from the state files present. With no saved state for --id in
group G it says so and changes nothing.

Exit status: 0 reset (or nothing saved: it says so); 2 bad flags; 3 the
state directory cannot be opened or is in use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if id, stateDir, err = localAgent(group, id, stateDir); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			name := host.StateName(id, group)
			file, err := statestore.FileName(name)
			if err != nil {
				return usageErrorf("--id %s, --group %s: %s", id, group, userWords(err.Error()))
			}
			// Nothing saved: say so and touch nothing (not even create the
			// directory), so a wrong --id or --state-dir is seen for what it is.
			if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(out, "nothing to reset: --state-dir %s does not exist (no agent --id %s ran with it; check --id and --state-dir)\n", stateDir, id)
				return nil
			}
			// A corrupt manifest (the list of states ever saved) is rebuilt
			// from the state files present: the reset is its recovery too.
			store, err := statestore.Open(stateDir, statestore.Options{RebuildCorruptManifest: true})
			if err != nil {
				if errors.Is(err, statestore.ErrLocked) {
					return configErrorf("--state-dir %s is in use: stop the agent (--id %s) first", stateDir, id)
				}
				return configErrorf("--state-dir %s: %s", stateDir, userWords(err.Error()))
			}
			defer store.Close()
			rebuilt := store.RebuiltCorruptManifest()
			if rebuilt {
				fmt.Fprintf(out, "rebuilt the corrupt state manifest %s from the state files present\n", filepath.Join(stateDir, statestore.ManifestName))
			}
			if _, err := store.Load(name); errors.Is(err, statestore.ErrNotFound) {
				if !rebuilt {
					fmt.Fprintf(out, "nothing to reset: no saved state of --id %s in group %s in %s (check --id, --group and --state-dir)\n", id, group, stateDir)
				}
				return nil
			}
			if err := store.Delete(name); err != nil {
				return configErrorf("--state-dir %s: %s", stateDir, userWords(err.Error()))
			}
			fmt.Fprintf(out, "reset %s in group %s (%s in %s): it starts from term 0\n", id, group, file, stateDir)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group (required)")
	f.StringVar(&id, "id", "", "the agent's --id (default: the host name)")
	f.StringVar(&stateDir, "state-dir", "", "the agent's --state-dir (default as for run)")
	return c
}
