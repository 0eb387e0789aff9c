// Package xgboost trains regression trees with the XGBoost 1.7 command-line
// program (Debian's xgboost package) run as a subprocess: single-threaded,
// niced or in the idle scheduling class so that serving on the same cores
// comes first, killed with its whole process group on timeout. It hands
// XGBoost its rows as a binary DMatrix (matrix.go), so that the values it
// trains on are float32(v) bit for bit, and parses the model it writes into
// a model.Trees that predicts bit for bit as XGBoost does.
package xgboost

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/internal/procgroup"
	"github.com/headroomhq/headroom/model"
)

// CLI runs the xgboost command-line program (Debian's package, 1.7) to
// train models. The zero value is ready to use.
type CLI struct {
	Binary  string        // program name or path; "" means "xgboost", found on PATH
	Timeout time.Duration // limit for one run; 0 means DefaultTimeout
	TempDir string        // where run directories are made; "" means os.TempDir()
	// Nice is the scheduling niceness (1-19) xgboost runs at, so that when
	// it shares cores with a predictor, serving comes first; 0 leaves it at
	// the trainer's own. (Setting it lower than the trainer's needs
	// privileges; without them the run keeps the trainer's niceness.)
	Nice int
	// Idle runs xgboost in Linux's idle scheduling class (SCHED_IDLE): it
	// gets a core only when nothing else wants one, and a request that
	// wakes takes the core from it at once, where a niced process may keep
	// it for the rest of its time slice. On a machine kept busy without
	// pause it would get nothing, and an unprivileged process cannot leave
	// the class again, so a run not finished within IdleGrace is killed and
	// run again at Nice, with Timeout of its own. The service turns it on
	// with --train-idle.
	Idle      bool
	IdleGrace time.Duration // 0 means DefaultIdleGrace
	// Starved, if set, is called when an idle-class run was starved and
	// run again at Nice, so the caller can stop asking for the idle class
	// for a while.
	Starved func()
}

// DefaultTimeout bounds one xgboost run when CLI.Timeout is zero.
// Training 200 depth-6 trees on tens of thousands of rows takes seconds; a
// run that takes a minute is stuck or starved.
const DefaultTimeout = 60 * time.Second

// DefaultIdleGrace bounds an idle-class run when CLI.IdleGrace is zero.
// Beside 5,000 predictions a second on two cores, a whole idle-class fit of
// one target of a full store, xgboost and all, took 1.2-4.2 s; a run still
// going after 10 s is being starved.
const DefaultIdleGrace = 10 * time.Second

// killWait is how long run waits for a killed xgboost to exit. A killed
// process in the idle class exits only when the kernel next schedules it,
// which on a saturated machine took longer than a shutdown may; past this
// the process is reaped in the background (it runs nothing more).
const killWait = time.Second

// errRunTimeout marks a run killed for taking longer than its limit.
var errRunTimeout = errors.New("timed out")

// Available returns the path of the xgboost binary, or an error saying it is
// not installed.
func (x CLI) Available() (string, error) {
	bin := x.Binary
	if bin == "" {
		bin = "xgboost"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("xgboost binary %q not found (install Debian's xgboost package): %w", bin, err)
	}
	return path, nil
}

// Train fits a reg:squarederror model of p.Rounds trees to rows X and
// labels y, boosting from baseScore, and returns it ready to predict. Each
// call runs xgboost once, single-threaded, in a temporary directory that it
// removes.
//
// XGBoost reads its input as float32. Train hands it every value as exactly
// float32(v) (writeMatrix), the value the returned model's Predict rounds
// its input to, so the model splits the training rows exactly where Predict
// will.
func (x CLI) Train(ctx context.Context, X [][]float64, y []float64, baseScore float64, p Params) (*model.Trees, error) {
	trees, _, err := x.train(ctx, X, y, nil, baseScore, p)
	return trees, err
}

// TrainWeighted is Train with a weight per row: each row's squared error
// counts weights[i] times (and its hessian, which min_child_weight bounds,
// as much). Weights must be finite and not negative, and not all zero.
func (x CLI) TrainWeighted(ctx context.Context, X [][]float64, y, weights []float64, baseScore float64, p Params) (*model.Trees, error) {
	if len(weights) != len(X) {
		return nil, fmt.Errorf("xgboost train: %d weights for %d rows", len(weights), len(X))
	}
	var sum float64
	for i, w := range weights {
		if !finite32(w) || w < 0 {
			return nil, fmt.Errorf("xgboost train: weight %d is %v, want a finite float32 not below 0", i, w)
		}
		sum += w
	}
	if !(sum > 0) {
		return nil, errors.New("xgboost train: every weight is 0")
	}
	trees, _, err := x.train(ctx, X, y, weights, baseScore, p)
	return trees, err
}

// train is Train, also returning the model file XGBoost wrote; weights nil
// weighs every row alike.
func (x CLI) train(ctx context.Context, X [][]float64, y, weights []float64, baseScore float64, p Params) (*model.Trees, []byte, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	if err := checkRows(X); err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	if len(y) != len(X) {
		return nil, nil, fmt.Errorf("xgboost train: %d labels for %d rows", len(y), len(X))
	}
	for i, v := range y {
		if !finite32(v) {
			return nil, nil, fmt.Errorf("xgboost train: label %d is %v, want a finite float32", i, v)
		}
	}
	if !finite32(baseScore) {
		return nil, nil, fmt.Errorf("xgboost train: base score %v, want a finite float32", baseScore)
	}
	dir, err := os.MkdirTemp(x.TempDir, "xgboost-train-")
	if err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	defer os.RemoveAll(dir)

	if err := writeMatrix(filepath.Join(dir, matrixFile), X, y, weights); err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	conf := append(trainConf(baseScore, p), `data = "`+matrixFile+`"`)
	modelPath, err := x.runAttempts(ctx, dir, conf)
	if err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	data, err := os.ReadFile(modelPath)
	if err != nil {
		return nil, nil, fmt.Errorf("xgboost train: read model: %w", err)
	}
	trees, err := model.ParseXGBoostJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	// A model that disagrees with the run's inputs means the CLI read
	// something other than what was written; refuse it rather than publish.
	switch {
	case trees.NumTrees() != p.Rounds:
		return nil, nil, fmt.Errorf("xgboost train: model has %d trees for %d rounds", trees.NumTrees(), p.Rounds)
	case trees.NumFeatures() != len(X[0]):
		return nil, nil, fmt.Errorf("xgboost train: model has %d features, data has %d", trees.NumFeatures(), len(X[0]))
	case trees.BaseScore() != float32(baseScore):
		return nil, nil, fmt.Errorf("xgboost train: model base score %v, asked for %v", trees.BaseScore(), float32(baseScore))
	}
	return trees, data, nil
}

// checkRows requires a non-empty rectangular matrix of values that are
// finite as float32.
func checkRows(X [][]float64) error {
	if len(X) == 0 {
		return errors.New("no rows")
	}
	n := len(X[0])
	if n == 0 {
		return errors.New("rows have no features")
	}
	for i, row := range X {
		if len(row) != n {
			return fmt.Errorf("row %d has %d features, row 0 has %d", i, len(row), n)
		}
		for j, v := range row {
			if !finite32(v) {
				return fmt.Errorf("row %d feature %d is %v, want a finite float32", i, j, v)
			}
		}
	}
	return nil
}

// finite32 reports whether v is finite once rounded to float32.
func finite32(v float64) bool {
	f := float64(float32(v))
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

// trainConf is the configuration of a run fitting p from baseScore, but for
// its data and model paths. Paths are relative to the run directory,
// because XGBoost reads '#' and '?' in a data path as URI syntax and TempDir
// may contain anything.
func trainConf(baseScore float64, p Params) []string {
	return []string{
		"task = train",
		"booster = gbtree",
		"objective = reg:squarederror",
		"tree_method = hist",
		"nthread = 1",
		"base_score = " + floatText(baseScore),
		"num_round = " + strconv.Itoa(p.Rounds),
		"max_depth = " + strconv.Itoa(p.MaxDepth),
		"eta = " + floatText(p.Eta),
		"subsample = " + floatText(p.Subsample),
		"colsample_bytree = " + floatText(p.ColsampleBytree),
		"min_child_weight = " + floatText(p.MinChildWeight),
		"gamma = " + floatText(p.Gamma),
		"lambda = " + floatText(p.Lambda),
		"alpha = " + floatText(p.Alpha),
		"seed = " + strconv.FormatInt(p.Seed, 10),
	}
}

// confFile is the configuration file of a run of conf, which writes its
// model to model.json in the run directory.
func confFile(conf []string) []byte {
	return []byte(strings.Join(append(slices.Clip(conf), `model_out = "model.json"`), "\n") + "\n")
}

// runAttempts trains with conf on dir's matrixFile and returns the path of
// the model file written. With Idle it first runs in the idle class for
// IdleGrace, then, if that run was starved, again at Nice. Each attempt runs
// in a directory of its own, so nothing a killed attempt left behind can be
// read as the next one's.
func (x CLI) runAttempts(ctx context.Context, dir string, conf []string) (string, error) {
	timeout := x.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	text := confFile(conf)
	attempt := func(name string, idle bool, limit time.Duration) (string, error) {
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o700); err != nil {
			return "", err
		}
		if err := os.Link(filepath.Join(dir, matrixFile), filepath.Join(sub, matrixFile)); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(sub, "train.conf"), text, 0o600); err != nil {
			return "", err
		}
		return filepath.Join(sub, "model.json"), x.run(ctx, sub, idle, limit, "train.conf")
	}
	if !x.Idle {
		return attempt("niced", false, timeout)
	}
	grace := x.IdleGrace
	if grace <= 0 {
		grace = DefaultIdleGrace
	}
	if grace >= timeout {
		return attempt("idle", true, timeout)
	}
	file, err := attempt("idle", true, grace)
	if !errors.Is(err, errRunTimeout) {
		return file, err
	}
	// Starved: the CPU never came free. Again, at Nice.
	if x.Starved != nil {
		x.Starved()
	}
	return attempt("niced", false, timeout)
}

// run runs the xgboost binary with args in dir, for at most limit, in the
// idle class if idle, else at Nice. On timeout or cancellation it kills the
// binary's whole process group, so nothing it started outlives the call,
// and waits at most killWait for it to exit. Errors carry the tail of the
// program's output, where XGBoost says what went wrong.
func (x CLI) run(ctx context.Context, dir string, idle bool, limit time.Duration, args ...string) error {
	bin, err := x.Available()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	out := &tailBuffer{max: 4 << 10}
	cmd := exec.CommandContext(runCtx, bin, args...)
	cmd.Dir = dir
	cmd.Env = runEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = out, out
	procgroup.Isolate(cmd)
	// Should anything escape the group and hold the output pipe open, Wait
	// gives up on it after this long instead of hanging.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	if err = cmd.Start(); err == nil {
		x.lowerPriority(cmd.Process.Pid, idle)
		err = x.wait(runCtx, cmd)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s interrupted after %v: %w%s", bin, time.Since(start).Round(time.Millisecond), ctx.Err(), out.suffix())
	case runCtx.Err() != nil:
		return fmt.Errorf("%s %w after %v (killed)%s", bin, errRunTimeout, limit, out.suffix())
	default:
		return fmt.Errorf("%s: %w%s", bin, err, out.suffix())
	}
}

// wait waits for cmd, or, once ctx has ended (and exec has killed the
// group), for at most killWait more; a goroutine reaps it after that.
func (x CLI) wait(ctx context.Context, cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(killWait):
		return ctx.Err()
	}
}

// lowerPriority lowers the priority of the process just started (the
// leader of its group), before xgboost has read its input: its threads,
// started later, inherit it. Failure is not an error: the run only keeps
// the trainer's priority.
func (x CLI) lowerPriority(pid int, idle bool) {
	if x.Nice > 0 {
		_ = procgroup.SetNice(pid, x.Nice)
	}
	if idle {
		priority.SetIdle(pid)
	}
}

// tailBuffer keeps the last max bytes written to it. It is safe for
// concurrent use: a run that gives up waiting for a killed process reads it
// while exec may still be copying the last output in.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// suffix formats the kept output for an error message: the lines XGBoost
// writes, without its native stack traces, which say nothing to an operator.
func (t *tailBuffer) suffix() string {
	t.mu.Lock()
	b := slices.Clone(t.buf)
	t.mu.Unlock()
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	var keep []string
	for line := range strings.SplitSeq(string(b), "\n") {
		s := strings.TrimSpace(line)
		if s == "" || s == "Stack trace:" || strings.HasPrefix(s, "[bt]") {
			continue
		}
		keep = append(keep, s)
	}
	if len(keep) == 0 {
		return " (no output)"
	}
	return ": " + strings.Join(keep, " | ")
}
