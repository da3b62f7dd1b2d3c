package main

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// benchCommands are the `pgsweep bench` workloads. Each prints, in one run on
// one database, pgsweep's rate side by side with the baselines it competes
// with.
var benchCommands = map[string]command{
	"claim":   {"claim + complete vs the seed-003 claim CTE and a plain SKIP LOCKED pop", runBenchClaim},
	"cleanup": benchCleanup,
	"mixed":   benchMixed,
}

func runBench(ctx context.Context, args []string, out io.Writer) error {
	names := make([]string, 0, len(benchCommands))
	for n := range benchCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(out, "usage: pgsweep bench <workload> [flags]\n\nworkloads:")
		for _, n := range names {
			fmt.Fprintf(out, "  %-9s %s\n", n, benchCommands[n].summary)
		}
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	cmd, ok := benchCommands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown workload %q (have %v)", errUsage, args[0], names)
	}
	return cmd.run(ctx, args[1:], out)
}
