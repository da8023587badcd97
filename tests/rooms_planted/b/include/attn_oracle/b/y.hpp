#pragma once
#include "attn_oracle/a/p.hpp"
