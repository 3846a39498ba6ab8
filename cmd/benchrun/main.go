// Command benchrun is `make bench`: it measures what respgate adds to a stream, side by side with
// the alternatives, in one run on one machine, and writes report.md and report.json to bench/out/
// (git-ignored: a report is one machine's run; docs/benchmarks.md keeps a dated summary).
//
// It starts, as separate processes on loopback ports (so /proc charges each its own CPU time and
// RSS): the vLLM simulator pacing tokens at a realistic rate, a bare httputil.ReverseProxy, and
// three respgate binaries. The arms are
//
//	A  the simulator reached directly (the baseline)
//	B  a bare reverse proxy in front of it, request body buffered (the floor of any gateway)
//	C  respgate, requests with store:false
//	D  respgate storing to Postgres (synchronous_commit as the server has it, normally on)
//	E  respgate storing to SQLite (a WAL file)
//
// and the scenarios (each measured in interleaved rounds whose order rotates; figures are the
// median of the round figures, with their spread; "added" figures are X − A paired per round):
//
//	latency    c=1: time to first byte and first delta (short streams), inter-event gaps (a long one)
//	background c=1: create → first event of background:true streams beside foreground ones (D, E)
//	c256       256 concurrent streams: latency, CPU per relayed event, RSS per open stream
//	allocs     heap allocations per relayed event and per delta, in instrumented twins of B, C, D, E
//	nonstream  non-streaming requests per second at c=16, and the best rate with p99 ≤ 10 ms
//	chain      previous_response_id chains of depth 1…1,000 and a 2 MB history: added TTFB, raw query
//	agent      a 150-turn agent session with tool outputs: TTFB at turn 150 over turn 1, bytes stored
//	capacity   a ramp of concurrent streams at 25 tokens/s: the most held with no lost event
//	fleet      64 agent sessions over four simulated vLLM replicas with prefix caches, behind two
//	           respgate replicas: cache hits, time to first token and load per routing policy,
//	           and one replica killed and restarted mid-run (fleet.go)
//
// Usage (make bench builds the binaries first):
//
//	benchrun [-bin bin] [-out bench/out] [-rounds 3] [-quick] [-only latency,c256,...]
//
// The simulator and the proxy are modes of this binary: `benchrun sim|proxy …` (see serve.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var err error
	mode := ""
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		mode = os.Args[1]
	}
	switch mode {
	case "sim":
		err = serveSim(os.Args[2:])
	case "proxy":
		err = serveProxy(os.Args[2:])
	case "", "run":
		args := os.Args[1:]
		if mode == "run" {
			args = os.Args[2:]
		}
		err = runBench(args)
	default:
		err = fmt.Errorf("unknown mode %q (want sim, proxy or run)", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

// options are the command-line settings of a run.
type options struct {
	binDir   string
	outDir   string
	dsn      string
	rounds   int
	quick    bool
	only     map[string]bool
	rampArms []string
	ramp     []int
	depths   []int
	profile  bool
	keepLogs bool
	// fleetEpsilon is the chain-affine pools' ε in the fleet scenario (0: fleetEpsilon).
	fleetEpsilon float64
	// fleetMinSlack is their min_slack (-1: respgate's default).
	fleetMinSlack int
}

func (o *options) want(s string) bool { return len(o.only) == 0 || o.only[s] }

var scenarioNames = []string{"latency", "background", "c256", "allocs", "nonstream", "chain", "agent", "capacity", "fleet"}

func runBench(args []string) error {
	fs := flag.NewFlagSet("benchrun", flag.ExitOnError)
	o := &options{}
	fs.StringVar(&o.binDir, "bin", "bin", "folder holding the respgate binary")
	fs.StringVar(&o.outDir, "out", "bench/out", "folder for report.md and report.json (created if missing)")
	def := os.Getenv("TEST_DATABASE_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	fs.StringVar(&o.dsn, "database-url", def, "Postgres to use (a fresh schema is created in it and dropped after); default $TEST_DATABASE_URL or the local test database")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per scenario")
	fs.BoolVar(&o.quick, "quick", false, "a much shorter run (smoke test of the harness; figures are rough)")
	only := fs.String("only", "", "comma-separated scenarios to run: "+strings.Join(scenarioNames, ","))
	rampArms := fs.String("ramp-arms", "A,B,D,D*", "arms of the capacity ramp (B the bare proxy, whose last step D should reach; D* is the diagnostic: D with synchronous_commit=off)")
	ramp := fs.String("ramp", "256,512,1024,2048", "concurrent streams of the capacity ramp's steps")
	depths := fs.String("depths", "", "chain depths of the chain scenario (default 1,10,50,100,1000; -quick 1,10,50,100)")
	fs.BoolVar(&o.profile, "profile", false, "also save CPU profiles in the log folder: of the gateway twins (Postgres: c=1, c=256, non-streamed, c=256 and non-streamed with store:false, the deepest warm chain; SQLite: c=256, non-streamed) and of a fleet respgate replica in the chain-affine pass")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the processes' logs even when the run succeeds")
	fs.Float64Var(&o.fleetEpsilon, "fleet-epsilon", fleetEpsilon, "the fleet scenario's chain-affine ε (docs/fleet.md \"Sizing ε\"; the default is what it sizes for the scenario's two respgate replicas)")
	fs.IntVar(&o.fleetMinSlack, "fleet-min-slack", -1, "the fleet scenario's chain-affine min_slack (-1: respgate's default)")
	_ = fs.Parse(args)
	if *only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	for _, a := range strings.Split(*rampArms, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.rampArms = append(o.rampArms, a)
		}
	}
	for _, s := range strings.Split(*ramp, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-ramp: bad step %q", s)
		}
		o.ramp = append(o.ramp, n)
	}
	for _, s := range strings.Split(*depths, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-depths: bad depth %q", s)
		}
		o.depths = append(o.depths, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	logDir, err := os.MkdirTemp("", "benchrun-")
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b := &bench{opt: o, p: defaultParams(o), logDir: logDir, log: log, started: time.Now()}
	b.rep = newReport(b)
	runErr := b.run(ctx)
	b.teardown()
	if err := b.writeReport(runErr); err != nil {
		return err
	}
	if runErr != nil || o.keepLogs {
		fmt.Fprintf(os.Stderr, "benchrun: process logs kept in %s\n", logDir)
	} else {
		_ = os.RemoveAll(logDir)
	}
	fmt.Fprintf(os.Stderr, "benchrun: report written to %s and %s in %s\n",
		filepath.Join(o.outDir, "report.md"), filepath.Join(o.outDir, "report.json"), time.Since(b.started).Round(time.Second))
	return runErr
}
