// Package trainer turns stored samples into published model bundles.
package trainer

import (
	"bufio"
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
	"syscall"
	"time"

	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/model"
)

// XGBoostParams are the boosting parameters of one training run, in
// XGBoost's terms.
type XGBoostParams struct {
	Rounds          int     // boosting rounds (num_round), one tree each
	MaxDepth        int     // max_depth
	Eta             float64 // learning rate
	Subsample       float64 // fraction of rows sampled per tree
	ColsampleBytree float64 // fraction of columns sampled per tree
	MinChildWeight  float64 // min_child_weight
	Gamma           float64 // min_split_loss
	Lambda          float64 // L2 regularisation (reg_lambda)
	Alpha           float64 // L1 regularisation (reg_alpha)
	Seed            int64   // random seed, for reproducible sampling
}

// DefaultXGBoostParams returns the parameters the trainer starts from,
// each measured with headroom eval (docs/ACCURACY.md). Depth 3 rather than
// 4: the trees correct a line in log space, and deeper ones fitted more of
// the noise on both targets, in random splits and in prequential replay.
func DefaultXGBoostParams() XGBoostParams {
	return XGBoostParams{
		Rounds:          200,
		MaxDepth:        3,
		Eta:             0.05,
		Subsample:       0.8,
		ColsampleBytree: 0.8,
		MinChildWeight:  5,
		Gamma:           0,
		Lambda:          30,
		Alpha:           0.01,
	}
}

// Validate reports the first parameter XGBoost would refuse or that would
// produce a model package model refuses.
func (p XGBoostParams) Validate() error {
	if p.Rounds < 1 {
		return fmt.Errorf("xgboost params: rounds %d, want at least 1", p.Rounds)
	}
	if p.MaxDepth < 1 || p.MaxDepth > model.MaxTreeDepth {
		return fmt.Errorf("xgboost params: max depth %d out of range [1, %d]", p.MaxDepth, model.MaxTreeDepth)
	}
	for _, r := range [...]struct {
		name    string
		v       float64
		min     float64
		minOpen bool // v must exceed min
		max     float64
	}{
		{"eta", p.Eta, 0, true, 1},
		{"subsample", p.Subsample, 0, true, 1},
		{"colsample_bytree", p.ColsampleBytree, 0, true, 1},
		{"min_child_weight", p.MinChildWeight, 0, false, math.MaxFloat32},
		{"gamma", p.Gamma, 0, false, math.MaxFloat32},
		{"lambda", p.Lambda, 0, false, math.MaxFloat32},
		{"alpha", p.Alpha, 0, false, math.MaxFloat32},
	} {
		low := r.v < r.min || (r.minOpen && r.v == r.min)
		if math.IsNaN(r.v) || low || r.v > r.max {
			lb := "["
			if r.minOpen {
				lb = "("
			}
			return fmt.Errorf("xgboost params: %s %v out of range %s%v, %v]", r.name, r.v, lb, r.min, r.max)
		}
	}
	return nil
}

// XGBoost runs the xgboost command-line program (Debian's package, 1.7) to
// train models. The zero value is ready to use.
type XGBoost struct {
	Binary  string        // program name or path; "" means "xgboost", found on PATH
	Timeout time.Duration // limit for one run; 0 means DefaultXGBoostTimeout
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

// DefaultXGBoostTimeout bounds one xgboost run when XGBoost.Timeout is zero.
// Training 200 depth-6 trees on tens of thousands of rows takes seconds; a
// run that takes a minute is stuck or starved.
const DefaultXGBoostTimeout = 60 * time.Second

// DefaultIdleGrace bounds an idle-class run when XGBoost.IdleGrace is zero.
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
func (x XGBoost) Available() (string, error) {
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
// XGBoost reads its input as float32. Train writes every value as text that
// XGBoost's parser reads back as exactly float32(v), the value the returned
// model's Predict rounds its input to, so the model splits the training rows
// exactly where Predict will (see xgboostText; only magnitudes below about
// 1e-35 may be read one float32 step off).
func (x XGBoost) Train(ctx context.Context, X [][]float64, y []float64, baseScore float64, p XGBoostParams) (*model.Trees, error) {
	trees, _, err := x.train(ctx, X, y, baseScore, p)
	return trees, err
}

// train is Train, also returning the model file XGBoost wrote.
func (x XGBoost) train(ctx context.Context, X [][]float64, y []float64, baseScore float64, p XGBoostParams) (*model.Trees, []byte, error) {
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

	if err := writeCSV(filepath.Join(dir, "train.csv"), X, y); err != nil {
		return nil, nil, fmt.Errorf("xgboost train: %w", err)
	}
	// Paths are relative to the run directory, because XGBoost reads '#' and
	// '?' in a data path as URI syntax and TempDir may contain anything.
	conf := []string{
		"task = train",
		"booster = gbtree",
		"objective = reg:squarederror",
		"tree_method = hist",
		"nthread = 1",
		"base_score = " + xgboostText(baseScore),
		"num_round = " + strconv.Itoa(p.Rounds),
		"max_depth = " + strconv.Itoa(p.MaxDepth),
		"eta = " + xgboostText(p.Eta),
		"subsample = " + xgboostText(p.Subsample),
		"colsample_bytree = " + xgboostText(p.ColsampleBytree),
		"min_child_weight = " + xgboostText(p.MinChildWeight),
		"gamma = " + xgboostText(p.Gamma),
		"lambda = " + xgboostText(p.Lambda),
		"alpha = " + xgboostText(p.Alpha),
		"seed = " + strconv.FormatInt(p.Seed, 10),
		`data = "train.csv?format=csv&label_column=0"`,
	}
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

// writeCSV writes rows as XGBoost's CSV input, the label in column 0 (0 when
// y is nil). NaN is written as "nan", which XGBoost reads as missing.
func writeCSV(path string, X [][]float64, y []float64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	for i, row := range X {
		label := 0.0
		if y != nil {
			label = y[i]
		}
		w.WriteString(xgboostText(label))
		for _, v := range row {
			w.WriteByte(',')
			w.WriteString(xgboostText(v))
		}
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// runAttempts trains with conf on dir's train.csv and returns the path of
// the model file written. With Idle it first runs in the idle class for
// IdleGrace, then, if that run was starved, again at Nice. Each attempt runs
// in a directory of its own, so nothing a killed attempt left behind can be
// read as the next one's.
func (x XGBoost) runAttempts(ctx context.Context, dir string, conf []string) (string, error) {
	timeout := x.Timeout
	if timeout <= 0 {
		timeout = DefaultXGBoostTimeout
	}
	text := strings.Join(append(slices.Clip(conf), `model_out = "model.json"`), "\n") + "\n"
	attempt := func(name string, idle bool, limit time.Duration) (string, error) {
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o700); err != nil {
			return "", err
		}
		if err := os.Link(filepath.Join(dir, "train.csv"), filepath.Join(sub, "train.csv")); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(sub, "train.conf"), []byte(text), 0o600); err != nil {
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
func (x XGBoost) run(ctx context.Context, dir string, idle bool, limit time.Duration, args ...string) error {
	bin, err := x.Available()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	out := &tailBuffer{max: 4 << 10}
	cmd := exec.CommandContext(runCtx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
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
func (x XGBoost) wait(ctx context.Context, cmd *exec.Cmd) error {
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
func (x XGBoost) lowerPriority(pid int, idle bool) {
	if x.Nice > 0 {
		_ = syscall.Setpriority(syscall.PRIO_PGRP, pid, x.Nice)
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

// xgboostText formats v for XGBoost's text readers (the CSV parser and the
// configuration file) so that they read exactly float32(v). They parse with
// dmlc-core's strtof, which is fast but not correctly rounded: it adds the
// integer and fraction parts in float32 and scales by powers of ten built
// from float32 products, so the shortest decimal for a float32 (what strconv
// writes) is sometimes read one ulp off: "1.3309378e+06" and "4.6888983e-04"
// are, and so are about 1% of plain decimals between 1 and 10000. The text
// is the first of these that dmlcStrtof, a bit-exact model of that parser,
// reads back as float32(v): the shortest plain decimal, plain decimals with
// more fraction digits, then a plain mantissa with an exponent. Only some
// values below 1e-35 in magnitude reach none of them; they fall back to the
// shortest decimal and may be read one ulp off.
func xgboostText(v float64) string {
	s, _ := xgboostDecimal(float32(v))
	return s
}

// xgboostDecimal is xgboostText for a float32; exact reports whether XGBoost
// reads the text as exactly v.
func xgboostDecimal(v float32) (text string, exact bool) {
	switch {
	case v != v:
		return "nan", true
	case math.IsInf(float64(v), 1):
		return "inf", true
	case math.IsInf(float64(v), -1):
		return "-inf", true
	}
	if s, ok := plainDecimal(v); ok {
		return s, true
	}
	sign, a := "", v
	if v < 0 {
		sign, a = "-", -v
	}
	// The parser clamps a mantissa below 1.175494351 when dividing by 1e38,
	// so subnormals are out of reach; the search below would only spin.
	if a < math.SmallestNonzeroFloat32*(1<<23) {
		return strconv.FormatFloat(float64(v), 'g', -1, 32), false
	}
	// Mantissa c and exponent e: the parser reads c (exactly, as
	// plainDecimal checks), then multiplies or divides by its own 10^e. Try
	// the float32 values around a·10^∓e; rounding against an inexact power
	// of ten skips some results, so several exponents may be needed.
	for _, mantissas := range [...][2]float64{{1, 1 << 63}, {1e-6, 1}} { // prefer 1e-30 to 0.000001e-24
		for e := 1; e <= 38; e++ {
			scale := dmlcPow10(e)
			for _, divide := range [...]bool{true, false} {
				m, expSign := float64(a)/float64(scale), "e+"
				if divide {
					m, expSign = float64(a)*float64(scale), "e-"
				}
				if m < mantissas[0] || m >= mantissas[1] {
					continue
				}
				c := float32(m)
				for range 3 {
					c = math.Nextafter32(c, 0)
				}
				for range 7 {
					if mant, ok := plainDecimal(c); ok {
						if s := sign + mant + expSign + strconv.Itoa(e); dmlcStrtof(s) == v {
							return s, true
						}
					}
					c = math.Nextafter32(c, float32(math.Inf(1)))
				}
			}
		}
	}
	return strconv.FormatFloat(float64(v), 'g', -1, 32), false
}

// plainDecimal returns digits with an optional fraction that dmlcStrtof
// reads as exactly v, if one of the forms it tries does: the shortest
// decimal, then the value rounded to 1, 2, … 19 fraction digits (the parser
// ignores digits past the 19th).
func plainDecimal(v float32) (string, bool) {
	if s := strconv.FormatFloat(float64(v), 'f', -1, 32); dmlcStrtof(s) == v {
		return s, true
	}
	for digits := 1; digits <= 19; digits++ {
		if s := strconv.FormatFloat(float64(v), 'f', digits, 64); dmlcStrtof(s) == v {
			return s, true
		}
	}
	return "", false
}

// dmlcStrtof is dmlc::ParseFloat<float> (dmlc-core's strtonum.h, used by
// XGBoost 1.7's CSV parser and parameter parser) for the forms
// xgboostDecimal writes: "nan", an optionally signed "inf", or an optional
// sign, digits, an optional fraction and an optional exponent. Every step rounds as the C++ does; explicit conversions stop the
// compiler from fusing operations.
func dmlcStrtof(s string) float32 {
	i := 0
	negative := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		negative = s[i] == '-'
		i++
	}
	switch rest := strings.ToLower(s[i:]); rest {
	case "inf", "infinity":
		if negative {
			return float32(math.Inf(-1))
		}
		return float32(math.Inf(1))
	case "nan":
		return float32(math.NaN())
	}
	var predec uint64 // wraps on overflow, as in C++
	for ; i < len(s) && isDigit(s[i]); i++ {
		predec = predec*10 + uint64(s[i]-'0')
	}
	value := float32(predec)
	if i < len(s) && s[i] == '.' {
		i++
		var frac, pow10 uint64 = 0, 1
		for n := 0; i < len(s) && isDigit(s[i]); i, n = i+1, n+1 {
			if n < 19 {
				frac = frac*10 + uint64(s[i]-'0')
				pow10 *= 10
			}
		}
		value = float32(value + float32(float64(frac)/float64(pow10)))
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		divide := false
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			divide = s[i] == '-'
			i++
		}
		var e uint32
		for ; i < len(s) && isDigit(s[i]); i++ {
			e = e*10 + uint32(s[i]-'0')
		}
		if e > 38 {
			e = 38
		}
		if e == 38 {
			switch {
			case !divide && value > 3.402823466:
				value = 3.402823466
			case divide && value < 1.175494351:
				value = 1.175494351
			}
		}
		if divide {
			value = float32(value / dmlcPow10(int(e)))
		} else {
			value = float32(value * dmlcPow10(int(e)))
		}
	}
	if negative {
		return -value
	}
	return value
}

// dmlcPow10 is 10^e as dmlc::ParseFloat<float> computes it: by 1e8 steps,
// then by 10, each product rounded to float32.
func dmlcPow10(e int) float32 {
	scale := float32(1)
	for ; e >= 8; e -= 8 {
		scale = float32(scale * 1e8)
	}
	for ; e > 0; e-- {
		scale = float32(scale * 10)
	}
	return scale
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
