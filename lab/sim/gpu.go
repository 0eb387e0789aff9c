package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// GPU is what the step-time model needs to know of an accelerator: its
// dense tensor rate, its memory and the link between the GPUs of one
// server that tensor parallelism talks over.
type GPU struct {
	Name string `json:"name"`
	// DenseFLOPS is the dense (no sparsity) bf16/fp16 tensor-core rate,
	// FLOP/s; FP8FLOPS the fp8 one (0: none).
	DenseFLOPS float64 `json:"dense_flops"`
	FP8FLOPS   float64 `json:"fp8_flops,omitempty"`
	// MemoryBytes is the memory capacity and MemoryBandwidth its peak rate,
	// bytes/s.
	MemoryBytes     float64 `json:"memory_bytes"`
	MemoryBandwidth float64 `json:"memory_bandwidth"`
	// LinkBandwidth is the rate from one GPU to another of the same server,
	// bytes/s in each direction: NVLink when NVLink is set, else PCIe.
	LinkBandwidth float64 `json:"link_bandwidth"`
	NVLink        bool    `json:"nvlink"`
}

// Validate reports the first figure the model cannot run with.
func (g GPU) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"dense_flops", g.DenseFLOPS}, {"memory_bytes", g.MemoryBytes}, {"memory_bandwidth", g.MemoryBandwidth},
		{"link_bandwidth", g.LinkBandwidth}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("gpu %q: %s = %v, need a positive number", g.Name, f.name, f.v)
		}
	}
	return nil
}

const (
	gib = 1 << 30
	tb  = 1e12
	gb  = 1e9
)

// GPUs are the accelerators known by name, from their vendors' public data
// sheets (dense bf16 rates, that is without the 2:4-sparsity doubling the
// sheets quote). Memory capacities are the marketed "GB", which for these
// parts are binary gigabytes; the part of it a CUDA program cannot use is
// within the activation budget (KVCapacity).
var GPUs = []GPU{
	{Name: "H100-SXM", DenseFLOPS: 989.5 * tb, FP8FLOPS: 1979 * tb, MemoryBytes: 80 * gib, MemoryBandwidth: 3.35 * tb, LinkBandwidth: 450 * gb, NVLink: true},
	{Name: "H100-NVL", DenseFLOPS: 835.5 * tb, FP8FLOPS: 1671 * tb, MemoryBytes: 94 * gib, MemoryBandwidth: 3.9 * tb, LinkBandwidth: 300 * gb, NVLink: true},
	{Name: "H200", DenseFLOPS: 989.5 * tb, FP8FLOPS: 1979 * tb, MemoryBytes: 141 * gib, MemoryBandwidth: 4.8 * tb, LinkBandwidth: 450 * gb, NVLink: true},
	{Name: "A100-SXM-80GB", DenseFLOPS: 312 * tb, MemoryBytes: 80 * gib, MemoryBandwidth: 2.039 * tb, LinkBandwidth: 300 * gb, NVLink: true},
	{Name: "L40S", DenseFLOPS: 362 * tb, FP8FLOPS: 733 * tb, MemoryBytes: 48 * gib, MemoryBandwidth: 0.864 * tb, LinkBandwidth: 32 * gb},
	{Name: "RTX-PRO-6000", DenseFLOPS: 503.8 * tb, MemoryBytes: 96 * gib, MemoryBandwidth: 1.597 * tb, LinkBandwidth: 63 * gb},
}

// GPUNames lists the names LookupGPU knows.
func GPUNames() []string {
	names := make([]string, len(GPUs))
	for i, g := range GPUs {
		names[i] = g.Name
	}
	return names
}

// LookupGPU returns a known GPU by name, case and punctuation aside
// ("h100-sxm", "H100_SXM" and "h100sxm" are H100-SXM).
func LookupGPU(name string) (GPU, bool) {
	key := gpuKey(name)
	i := slices.IndexFunc(GPUs, func(g GPU) bool { return gpuKey(g.Name) == key })
	if i < 0 {
		return GPU{}, false
	}
	return GPUs[i], true
}

func gpuKey(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ReadGPU reads a GPU data sheet in JSON: either a flat one, as the
// inference-sim data sheets are (compute.bf16_tensor_core in TFLOP/s,
// halved when compute.with_sparsity; memory.capacity_gb;
// memory.bandwidth_tb_s; interconnect.nvlink_bandwidth_gb_s, both
// directions together), or one whose figures are {"value": …} objects
// (compute.bf16_tensor_tflops_dense, memory.capacity_gb,
// memory.bandwidth_gb_s, interconnect.host_interface.
// bandwidth_gb_s_per_direction), and falls back to PCIe when the part has
// no NVLink.
func ReadGPU(path string) (GPU, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return GPU{}, fmt.Errorf("read gpu data sheet: %w", err)
	}
	g, err := ParseGPU(data)
	if err != nil {
		return GPU{}, fmt.Errorf("gpu data sheet %s: %w", path, err)
	}
	return g, nil
}

// ParseGPU reads a GPU data sheet's bytes (ReadGPU's formats).
func ParseGPU(data []byte) (GPU, error) {
	var raw struct {
		Name    string                     `json:"name"`
		Compute map[string]json.RawMessage `json:"compute"`
		Memory  map[string]json.RawMessage `json:"memory"`
		Link    map[string]json.RawMessage `json:"interconnect"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return GPU{}, fmt.Errorf("decode: %w", err)
	}
	// figure reads a number, bare or as an object's "value" (or, for a
	// link, its "bandwidth_gb_s_per_direction").
	figure := func(m map[string]json.RawMessage, key string) float64 {
		v, ok := m[key]
		if !ok {
			return 0
		}
		var f float64
		if json.Unmarshal(v, &f) == nil {
			return f
		}
		var o map[string]any
		if json.Unmarshal(v, &o) != nil {
			return 0
		}
		for _, k := range []string{"bandwidth_gb_s_per_direction", "value"} {
			if f, ok := o[k].(float64); ok {
				return f
			}
		}
		return 0
	}
	g := GPU{Name: raw.Name}
	sparse := false
	if v, ok := raw.Compute["with_sparsity"]; ok {
		_ = json.Unmarshal(v, &sparse)
	}
	if f := figure(raw.Compute, "bf16_tensor_tflops_dense"); f > 0 {
		g.DenseFLOPS = f * tb
	} else if f := figure(raw.Compute, "bf16_tensor_core"); f > 0 {
		g.DenseFLOPS = f * tb
		if sparse {
			g.DenseFLOPS /= 2
		}
	}
	if f := figure(raw.Compute, "fp8_tensor_core"); f > 0 {
		g.FP8FLOPS = f * tb
		if sparse {
			g.FP8FLOPS /= 2
		}
	}
	g.MemoryBytes = figure(raw.Memory, "capacity_gb") * gib
	if f := figure(raw.Memory, "bandwidth_tb_s"); f > 0 {
		g.MemoryBandwidth = f * tb
	} else {
		g.MemoryBandwidth = figure(raw.Memory, "bandwidth_gb_s") * gb
	}
	if f := figure(raw.Link, "nvlink_bandwidth_gb_s"); f > 0 {
		g.LinkBandwidth, g.NVLink = f/2*gb, true
	} else if f := figure(raw.Link, "host_interface"); f > 0 {
		g.LinkBandwidth = f * gb
	} else if f := figure(raw.Link, "pcie_bandwidth_gb_s"); f > 0 {
		g.LinkBandwidth = f / 2 * gb
	}
	return g, g.Validate()
}
