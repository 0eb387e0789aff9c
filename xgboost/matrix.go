package xgboost

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

// The training rows go to the CLI as a binary DMatrix, the file XGBoost's
// own DMatrix.save_binary writes and DMatrix::Load recognises by its magic
// number whatever its name: the layout of XGBoost 1.6 to 2.1 (src/data/
// simple_dmatrix.cc, SaveToLocalFile, and MetaInfo::SaveBinary in
// src/data/data.cc), every number little-endian as dmlc-core's streams
// write them. Read so, the rows need no parsing, neither the CLI's CSV
// parse nor the search for text that parse reads exactly (floatText), both
// a share of every fit's CPU (PERFORMANCE.md, Retraining); and the values
// are float32(v) bit for bit, where text leaves magnitudes below about
// 1e-35 one float32 step off.
//
// The file holds, in order:
//
//	int32   magic 0xffffab01
//	"version:" and three int32s (major, minor, patch)
//	uint64  the number of meta fields, numMetaFields
//	the meta fields, each its name (a string), its type (uint8: 1
//	        float32, 3 uint32, 4 uint64, 5 string), a bool that is 1 for a
//	        scalar, then the scalar, or a vector's shape (two uint64s) and
//	        the vector
//	the row offsets (a vector of uint64, rows+1 of them)
//	the entries (a vector of (uint32 column, float32 value) pairs, by row)
//
// where a vector or string is its uint64 length followed by its elements.
const (
	matrixFile    = "train.dmatrix"
	matrixMagic   = 0xffffab01
	numMetaFields = 12 // MetaInfo::kNumField
)

// The version the file says wrote it, Debian's; XGBoost 1.6 to 2.1 read
// files of 1.6 and later.
const (
	matrixMajor = 1
	matrixMinor = 7
	matrixPatch = 4
)

// DMatrix meta field types (xgboost::DataType).
const (
	typeFloat32 = 1
	typeUint32  = 3
	typeUint64  = 4
	typeString  = 5
)

// writeMatrix writes rows X, labels y and, unless nil, a weight per row as
// a binary DMatrix at path. Every row holds every column: the values are
// finite (checkRows), so none is missing.
func writeMatrix(path string, X [][]float64, y, weights []float64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := &matrixWriter{w: bufio.NewWriterSize(f, 1<<16)}
	rows, cols := uint64(len(X)), uint64(0)
	if rows > 0 {
		cols = uint64(len(X[0]))
	}
	w.uint32(matrixMagic)
	w.bytes([]byte("version:"))
	w.uint32(matrixMajor)
	w.uint32(matrixMinor)
	w.uint32(matrixPatch)
	w.uint64(numMetaFields)
	w.scalar("num_row", rows)
	w.scalar("num_col", cols)
	w.scalar("num_nonzero", rows*cols)
	w.field("labels", typeFloat32, rows, 1) // a tensor of shape (rows, 1)
	w.float32s(y)
	w.empty("group_ptr", typeUint32, 1)
	w.field("weights", typeFloat32, uint64(len(weights)), 1)
	w.float32s(weights)
	w.empty("base_margin", typeFloat32, 0) // a tensor of shape (0, 0)
	w.empty("labels_lower_bound", typeFloat32, 1)
	w.empty("labels_upper_bound", typeFloat32, 1)
	w.empty("feature_names", typeString, 1)
	w.empty("feature_types", typeString, 1)
	w.empty("feature_weights", typeFloat32, 1)

	w.uint64(rows + 1)
	for i := range rows + 1 {
		w.uint64(i * cols)
	}
	w.uint64(rows * cols)
	for _, row := range X {
		for j, v := range row {
			w.uint32(uint32(j))
			w.uint32(math.Float32bits(float32(v)))
		}
	}
	if err := w.w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// matrixWriter writes dmlc-core's little-endian stream encoding. Write
// errors stay in the bufio.Writer, which reports the first at Flush.
type matrixWriter struct {
	w   *bufio.Writer
	buf [8]byte
}

func (m *matrixWriter) bytes(b []byte) { m.w.Write(b) }

func (m *matrixWriter) uint32(v uint32) {
	binary.LittleEndian.PutUint32(m.buf[:4], v)
	m.w.Write(m.buf[:4])
}

func (m *matrixWriter) uint64(v uint64) {
	binary.LittleEndian.PutUint64(m.buf[:], v)
	m.w.Write(m.buf[:])
}

func (m *matrixWriter) string(s string) {
	m.uint64(uint64(len(s)))
	m.w.WriteString(s)
}

// scalar writes a uint64 meta field.
func (m *matrixWriter) scalar(name string, v uint64) {
	m.string(name)
	m.w.WriteByte(typeUint64)
	m.w.WriteByte(1)
	m.uint64(v)
}

// field writes a vector or tensor meta field's header: its name, type and
// shape. Its vector follows.
func (m *matrixWriter) field(name string, typ byte, rows, cols uint64) {
	m.string(name)
	m.w.WriteByte(typ)
	m.w.WriteByte(0)
	m.uint64(rows)
	m.uint64(cols)
}

// empty writes a meta field of no elements, a vector of cols columns.
func (m *matrixWriter) empty(name string, typ byte, cols uint64) {
	m.field(name, typ, 0, cols)
	m.uint64(0)
}

// float32s writes v as a vector of float32.
func (m *matrixWriter) float32s(v []float64) {
	m.uint64(uint64(len(v)))
	for _, x := range v {
		m.uint32(math.Float32bits(float32(x)))
	}
}
