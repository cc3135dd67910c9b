package main

import (
	"errors"
	"fmt"

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

Exit status: 0 reset (or nothing saved); 2 bad flags; 3 the state directory
cannot be opened or is in use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if id, stateDir, err = localAgent(group, id, stateDir); err != nil {
				return err
			}
			store, err := statestore.Open(stateDir)
			if err != nil {
				if errors.Is(err, statestore.ErrLocked) {
					return configErrorf("--state-dir %s is in use: stop the agent (--id %s) first", stateDir, id)
				}
				return configErrorf("--state-dir %s: %s", stateDir, userWords(err.Error()))
			}
			defer store.Close()
			if err := store.Delete(host.StateName(id, group)); err != nil {
				return configErrorf("--state-dir %s: %s", stateDir, userWords(err.Error()))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reset %s in group %s (%s): it starts from term 0\n", id, group, stateDir)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group (required)")
	f.StringVar(&id, "id", "", "the agent's --id (default: the host name)")
	f.StringVar(&stateDir, "state-dir", "", "the agent's --state-dir (default as for run)")
	return c
}
