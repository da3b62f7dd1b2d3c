//go:build bench

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"

	"github.com/pgsweep/pgsweep/internal/bench"
)

// The bench build (go build -tags bench; make build-bench) adds `pgsweep
// bench`: the workloads and the research baselines they compete with live
// in the bench module (internal/bench), never in the production binary.
func init() {
	commands["bench"] = command{"measure pgsweep against its baselines", runBench}
}

// benchCommands are the `pgsweep bench` workloads (package internal/bench).
// Each prints, in one run on one database, pgsweep's rate side by side with
// the baselines it competes with. Their --database-url never falls back to
// PGSWEEP_DATABASE_URL (the runner's database), only to the PG* variables.
var benchCommands = map[string]command{
	"claim":   {"claim + complete vs the seed-003 claim CTE and a plain SKIP LOCKED pop", benchWorkload("claim", bench.Claim)},
	"cleanup": {"retention: CAP's collector loop vs retention_run vs one DELETE", benchWorkload("cleanup", bench.Cleanup)},
	"relay": {"the relay to a broker: burn-down vs claim + complete, commit-to-ack latency with and without direct dispatch",
		benchWorkload("relay", bench.Relay)},
	"mixed": {"claim latency of live traffic with and without a retention drain running", benchWorkload("mixed", bench.Mixed)},
	"ui":    {"the dashboard at scale: each page's server time and buffers read, and the snapshot's cost", benchWorkload("ui", bench.UI)},
}

// benchOptions is a workload's options: they register their own flags.
type benchOptions[O any] interface {
	*O
	RegisterFlags(fs *flag.FlagSet)
}

// benchWorkload is the CLI side of a workload: its options' flags, plus
// --cpuprofile and --memprofile, then run with their values.
func benchWorkload[O any, P benchOptions[O]](name string, run func(context.Context, O, io.Writer) error) func(context.Context, []string, io.Writer) error {
	return func(ctx context.Context, args []string, out io.Writer) error {
		fs := newFlagSet("bench " + name)
		var o O
		P(&o).RegisterFlags(fs)
		cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
		memProfile := fs.String("memprofile", "", "write an allocation profile of the run to this file (go tool pprof -sample_index=alloc_space)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		stop, err := startProfiles(*cpuProfile, *memProfile)
		if err != nil {
			return err
		}
		err = scratchErr(run(ctx, o, out))
		return errors.Join(err, stop())
	}
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

// startProfiles starts the CPU profile (cpu not empty) and returns the
// function that stops it and writes the allocation profile (mem not empty).
func startProfiles(cpu, mem string) (func() error, error) {
	var cpuFile *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		cpuFile = f
	}
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		if mem != "" {
			f, err := os.Create(mem)
			if err != nil {
				return errors.Join(append(errs, fmt.Errorf("memprofile: %w", err))...)
			}
			runtime.GC() // up-to-date statistics
			errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}
