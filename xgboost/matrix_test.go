package xgboost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeCSV writes rows as XGBoost's CSV input, in text it reads back
// exactly (floatText), the label in column 0 (0 when y is nil). NaN is
// written as "nan", which XGBoost reads as missing. The tests predict with
// the CLI from it.
func writeCSV(path string, X [][]float64, y, weights []float64) error {
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
		w.WriteString(floatText(label))
		if weights != nil {
			w.WriteByte(',')
			w.WriteString(floatText(weights[i]))
		}
		for _, v := range row {
			w.WriteByte(',')
			w.WriteString(floatText(v))
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

// The binary matrix is the data the CLI's CSV reader gives it: a model
// trained on it is byte for byte the one trained on the same rows as CSV
// text that reads back exactly (floatText), with and without weights.
func TestMatrixTrainsAsCSV(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost four times; skipped with -short")
	}
	x := requireCLI(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	X, y := syntheticRows(rng, 3000)
	weights := make([]float64, len(y))
	for i := range weights {
		weights[i] = 0.1 + rng.Float64()*3
	}
	p := DefaultParams()
	p.Rounds = 40
	p.Subsample = 0.8 // the sampling draws from the row count and seed alone
	for _, w := range [][]float64{nil, weights} {
		_, fromMatrix, err := x.train(ctx, X, y, w, mean(y), p)
		if err != nil {
			t.Fatal(err)
		}
		fromCSV, err := x.trainCSV(ctx, X, y, w, mean(y), p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fromMatrix, fromCSV) {
			t.Errorf("weighted %v: the model trained on the binary matrix differs from the one trained on CSV", w != nil)
		}
	}
}

// trainCSV is train as it was before the binary matrix, on CSV text,
// returning the model file.
func (x CLI) trainCSV(ctx context.Context, X [][]float64, y, weights []float64, baseScore float64, p Params) ([]byte, error) {
	dir, err := os.MkdirTemp(x.TempDir, "xgboost-csv-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	data := `data = "train.csv?format=csv&label_column=0"`
	if weights != nil {
		data = `data = "train.csv?format=csv&label_column=0&weight_column=1"`
	}
	if err := writeCSV(filepath.Join(dir, "train.csv"), X, y, weights); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "train.conf"), confFile(append(trainConf(baseScore, p), data)), 0o600); err != nil {
		return nil, err
	}
	if err := x.run(ctx, dir, false, DefaultTimeout, "train.conf"); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "model.json"))
}

// BenchmarkWriteMatrix writes a training file of a full store's rows
// (20,000 per target): the part of a tree fit spent before the CLI starts.
// BenchmarkWriteCSV is the same rows as the text the CLI read before.
func BenchmarkWriteMatrix(b *testing.B) {
	X, y := syntheticRows(rand.New(rand.NewPCG(1, 2)), 20000)
	for _, bc := range []struct {
		name  string
		write func(string, [][]float64, []float64, []float64) error
	}{{"matrix", writeMatrix}, {"csv", writeCSV}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "train")
			for b.Loop() {
				if err := bc.write(path, X, y, nil); err != nil {
					b.Fatal(err)
				}
			}
			if fi, err := os.Stat(path); err == nil {
				b.ReportMetric(float64(fi.Size())/1e6, "MB")
			}
		})
	}
}

// matrixRows is what readMatrix found in a binary matrix.
type matrixRows struct {
	X          [][]float32
	y, weights []float32
}

// readMatrix reads a binary matrix as XGBoost 1.7's loader does, with the
// checks it makes (MetaInfo::LoadBinary): each meta field's name, type and
// kind in order, vectors of one column, and rows whose offsets cover the
// entries.
func readMatrix(b []byte) (matrixRows, error) {
	r := &matrixReader{b: b}
	var m matrixRows
	if magic := r.uint32(); magic != matrixMagic {
		return m, fmt.Errorf("magic %#x", magic)
	}
	if v := string(r.next(8)); v != "version:" {
		return m, fmt.Errorf("version tag %q", v)
	}
	if v := [3]uint32{r.uint32(), r.uint32(), r.uint32()}; v[0] != 1 || v[1] < 6 {
		return m, fmt.Errorf("version %v, XGBoost 1.7 reads 1.6 and later", v)
	}
	if n := r.uint64(); n != numMetaFields {
		return m, fmt.Errorf("%d meta fields, want %d", n, numMetaFields)
	}
	var rows, cols, nonzero uint64
	for _, f := range []struct {
		name   string
		typ    byte
		scalar *uint64
		vector *[]float32
		tensor bool
	}{
		{"num_row", typeUint64, &rows, nil, false},
		{"num_col", typeUint64, &cols, nil, false},
		{"num_nonzero", typeUint64, &nonzero, nil, false},
		{"labels", typeFloat32, nil, &m.y, true},
		{"group_ptr", typeUint32, nil, nil, false},
		{"weights", typeFloat32, nil, &m.weights, false},
		{"base_margin", typeFloat32, nil, nil, true},
		{"labels_lower_bound", typeFloat32, nil, nil, false},
		{"labels_upper_bound", typeFloat32, nil, nil, false},
		{"feature_names", typeString, nil, nil, false},
		{"feature_types", typeString, nil, nil, false},
		{"feature_weights", typeFloat32, nil, nil, false},
	} {
		if name := string(r.next(int(r.uint64()))); name != f.name {
			return m, fmt.Errorf("field %q where %q belongs", name, f.name)
		}
		if typ := r.next(1)[0]; typ != f.typ {
			return m, fmt.Errorf("field %s has type %d, want %d", f.name, typ, f.typ)
		}
		isScalar := r.next(1)[0] == 1
		if isScalar != (f.scalar != nil) {
			return m, fmt.Errorf("field %s: scalar %v", f.name, isScalar)
		}
		if f.scalar != nil {
			*f.scalar = r.uint64()
			continue
		}
		shape := [2]uint64{r.uint64(), r.uint64()}
		n := r.uint64()
		if !f.tensor && shape[1] != 1 {
			return m, fmt.Errorf("field %s has %d columns, the loader wants 1", f.name, shape[1])
		}
		if shape[0]*shape[1] != n {
			return m, fmt.Errorf("field %s: shape %v for %d elements", f.name, shape, n)
		}
		switch {
		case f.vector != nil:
			for range n {
				*f.vector = append(*f.vector, math.Float32frombits(r.uint32()))
			}
		case n != 0:
			return m, fmt.Errorf("field %s has %d elements, want none", f.name, n)
		}
	}
	if uint64(len(m.y)) != rows {
		return m, fmt.Errorf("%d labels for %d rows", len(m.y), rows)
	}
	offsets := make([]uint64, r.uint64())
	for i := range offsets {
		offsets[i] = r.uint64()
	}
	entries := r.uint64()
	if uint64(len(offsets)) != rows+1 || offsets[0] != 0 || offsets[rows] != entries || entries != nonzero {
		return m, fmt.Errorf("offsets %v for %d rows, %d entries, %d nonzero", offsets, rows, entries, nonzero)
	}
	for i := range rows {
		row := make([]float32, cols)
		for range offsets[i+1] - offsets[i] {
			j := r.uint32()
			if uint64(j) >= cols {
				return m, fmt.Errorf("row %d: column %d of %d", i, j, cols)
			}
			row[j] = math.Float32frombits(r.uint32())
		}
		m.X = append(m.X, row)
	}
	if r.err != nil || len(r.b) != 0 {
		return m, fmt.Errorf("%v, %d bytes left over", r.err, len(r.b))
	}
	return m, nil
}

type matrixReader struct {
	b   []byte
	err error
}

func (r *matrixReader) next(n int) []byte {
	if n > len(r.b) {
		r.err = fmt.Errorf("truncated: %d bytes wanted, %d left", n, len(r.b))
		r.b = nil
		return make([]byte, n)
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *matrixReader) uint32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *matrixReader) uint64() uint64 { return binary.LittleEndian.Uint64(r.next(8)) }

func TestWriteMatrixLayout(t *testing.T) {
	X := [][]float64{{1330937.8, 0.1, 1e-38}, {7, -2.5, 0}}
	y := []float64{12.345, 4.6888983e-04}
	for _, weights := range [][]float64{nil, {0.5, 2}} {
		path := filepath.Join(t.TempDir(), matrixFile)
		if err := writeMatrix(path, X, y, weights); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readMatrix(b)
		if err != nil {
			t.Fatalf("weights %v: %v", weights, err)
		}
		// trainer's TestGateRefusesAbsurdTrees has a fake CLI read it there.
		if cols := binary.LittleEndian.Uint64(b[74:]); cols != uint64(len(X[0])) {
			t.Errorf("num_col at byte 74 is %d, want %d", cols, len(X[0]))
		}
		want := matrixRows{y: float32s(y), weights: float32s(weights)}
		for _, row := range X {
			want.X = append(want.X, float32s(row))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("weights %v: read back %+v, want %+v", weights, got, want)
		}
	}
}

func float32s(v []float64) []float32 {
	if v == nil {
		return nil
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
