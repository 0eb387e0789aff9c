package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// EngineArgs are the vLLM engine arguments a deployment passes (the ones
// the simulator models), under vLLM's names.
type EngineArgs struct {
	TP                   int     `json:"tensor_parallel_size"`
	MaxNumSeqs           int     `json:"max_num_seqs"`
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
	MaxModelLen          int     `json:"max_model_len,omitempty"` // 0: the model's own
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	PrefixCaching        bool    `json:"enable_prefix_caching"`
	AsyncScheduling      bool    `json:"async_scheduling"`
}

// DefaultEngineArgs are vLLM's V1 engine's defaults: one GPU, 256
// sequences, 8192 batched tokens, 90% of GPU memory, prefix caching and
// asynchronous scheduling on, chunked prefill (always, in V1).
func DefaultEngineArgs() EngineArgs {
	return EngineArgs{TP: 1, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192, GPUMemoryUtilization: 0.9,
		PrefixCaching: true, AsyncScheduling: true}
}

// EngineArgKeys lists the keys ParseEngineArgs accepts.
var EngineArgKeys = []string{"tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
	"gpu_memory_utilization", "enable_prefix_caching", "async_scheduling"}

// ParseEngineArgs sets the arguments of an inline list
// "key=value,key=value" (keys as vLLM's, dashes or underscores) on base.
func ParseEngineArgs(spec string, base EngineArgs) (EngineArgs, error) {
	a := base
	for _, kv := range strings.Split(spec, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return EngineArgs{}, fmt.Errorf("engine args %q: %q is not key=value", spec, kv)
		}
		key, value = strings.ReplaceAll(strings.TrimSpace(key), "-", "_"), strings.TrimSpace(value)
		var err error
		integer := func(dst *int) { *dst, err = strconv.Atoi(value) }
		switch key {
		case "tensor_parallel_size", "tp":
			integer(&a.TP)
		case "max_num_seqs":
			integer(&a.MaxNumSeqs)
		case "max_num_batched_tokens":
			integer(&a.MaxNumBatchedTokens)
		case "max_model_len":
			integer(&a.MaxModelLen)
		case "gpu_memory_utilization":
			a.GPUMemoryUtilization, err = strconv.ParseFloat(value, 64)
		case "enable_prefix_caching":
			a.PrefixCaching, err = strconv.ParseBool(value)
		case "async_scheduling":
			a.AsyncScheduling, err = strconv.ParseBool(value)
		default:
			return EngineArgs{}, fmt.Errorf("engine args: unknown key %q (known: %s)", key, strings.Join(EngineArgKeys, ", "))
		}
		if err != nil {
			return EngineArgs{}, fmt.Errorf("engine args: %s: %q is not a valid value", key, value)
		}
	}
	return a, a.Validate()
}

// Validate reports the first argument vLLM would refuse.
func (a EngineArgs) Validate() error {
	switch {
	case a.TP < 1:
		return fmt.Errorf("engine args: tensor_parallel_size %d, need at least 1", a.TP)
	case a.MaxNumSeqs < 1 || a.MaxNumBatchedTokens < 1:
		return fmt.Errorf("engine args: max_num_seqs %d and max_num_batched_tokens %d, need at least 1", a.MaxNumSeqs, a.MaxNumBatchedTokens)
	case a.MaxModelLen < 0:
		return fmt.Errorf("engine args: max_model_len %d, need 0 (the model's) or more", a.MaxModelLen)
	case !(a.GPUMemoryUtilization > 0 && a.GPUMemoryUtilization <= 1):
		return fmt.Errorf("engine args: gpu_memory_utilization %v, need a fraction in (0, 1]", a.GPUMemoryUtilization)
	}
	return nil
}

// DeploymentConfig is the simulated engine of arch served on GPUs of gpu
// with args: vLLM's scheduler limits, the KV cache sized from the GPU's
// memory (Roofline.KVBlocks), and steps priced by the Roofline model with
// coef. It is one server; set Servers for replicas.
func DeploymentConfig(arch Architecture, gpu GPU, args EngineArgs, coef Coefficients) (Config, error) {
	if err := args.Validate(); err != nil {
		return Config{}, err
	}
	r := Roofline{Arch: arch, GPU: gpu, TP: args.TP, Coef: coef}
	if err := r.Validate(); err != nil {
		return Config{}, err
	}
	blocks, err := r.KVBlocks(args.GPUMemoryUtilization)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		Name: fmt.Sprintf("%s on %d × %s", arch.Name, args.TP, gpu.Name), Servers: 1, KVBlocks: blocks,
		PrefixCaching: args.PrefixCaching, MaxNumSeqs: args.MaxNumSeqs, MaxNumBatchedTokens: args.MaxNumBatchedTokens,
		MaxModelLen: args.MaxModelLen, AsyncScheduling: args.AsyncScheduling, Cost: DefaultCostModel(), Roofline: &r,
	}
	return cfg, cfg.Validate()
}
