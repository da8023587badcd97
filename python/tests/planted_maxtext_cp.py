"""A planted twin of attn_oracle.stacks.maxtext_cp: one convention misapplied, for its test to catch."""
import jax.numpy as jnp

from attn_oracle.stacks import maxtext_cp


class DualChunkSwapForwardAsInverse(maxtext_cp.DualChunkSwap):
    """Planted: K/V restored with reorder_sequence's forward order (to_contiguous left False)."""

    name = "planted-maxtext-cp-forward-as-inverse"

    def cp_reorder(self, layout, problem, values, width, inverse):
        def fn(x):
            return self.max_utils.reorder_sequence(jnp.asarray(x, jnp.int32), int(layout.cp), 1, False)

        rows, t = problem.batch.q_segment_ids.shape
        return maxtext_cp._exact(values, (rows, t, int(width)), lambda index: self._call(fn, index))
