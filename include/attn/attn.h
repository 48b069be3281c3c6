#pragma once
// attn: attention modules for LibTorch. Include this umbrella header; everything is in namespace attn.

#include <attn/cpu_kernel_info.h>
#include <attn/device.h>
#include <attn/functional.h>
#include <attn/hadamard_rows.h>
#include <attn/huge_pages.h>
#include <attn/kv_cache.h>
#include <attn/io/files.h>
#include <attn/io/state_dict.h>
#include <attn/modules/attention_head.h>
#include <attn/modules/cross_attention.h>
#include <attn/modules/multi_head_attention.h>
#include <attn/modules/rotary_embedding.h>
#include <attn/options.h>
#include <attn/paged_kv_cache.h>
#include <attn/rotary.h>
#include <attn/token_tree.h>
#include <attn/varlen.h>
#include <attn/version.h>
