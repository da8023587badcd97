#pragma once
#include "attn_oracle/a/q.hpp"
#include "attn_oracle/b/y.hpp"
