/*
 * dk_std_sort.h — the order in which libstdc++'s std::sort leaves equal keys, without sorting.
 *
 * Note [torch's order of equal scores]
 * torch.sort(descending=True) without stable=True is, on the CPU, std::sort (libstdc++'s
 * introsort) over (value, index) pairs compared by value alone: NaN first, then decreasing, -0.0
 * equal to +0.0. Items with equal values come out in whatever order its partitions leave them,
 * which depends on every other value. torchvision's batched_nms returns that order for many
 * boxes (dkit/compat/torchvision.py), so a drop-in replacement has to reproduce it, bit for bit:
 * tests/python/test_nms.py checks it against torch.sort itself on torch 1.13, 2.6 and 2.14,
 * whose sorts agree.
 *
 * Sorting again with std::sort's steps would cost n log n moves. What decides the order of equal
 * items is only the partitions of ranges holding two of them: once two equal items fall into
 * different ranges, the ranges keep their order; a range left with at most one item of each value
 * can only reorder items whose final places are known from their values; and std::sort's last
 * step, an insertion sort, never moves an item past an equal one. So the partitions are replayed
 * only for ranges that hold two equal items (found with one pass over each range), and every
 * other item goes straight to the place its value gives it. With a few dozen equal pairs among
 * 10,000 kept scores that is a few passes over the array instead of fourteen.
 *
 * The replayed steps are libstdc++'s (bits/stl_algo.h and bits/stl_heap.h, unchanged since GCC
 * 4.x): introsort down to ranges of 16 with a depth limit of 2 floor(log2 n), median of
 * first + 1, middle and last - 1 moved to the front, Hoare's unguarded partition, heapsort where
 * the depth runs out, then a final insertion sort.
 */
#ifndef DK_STD_SORT_H
#define DK_STD_SORT_H

#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * perm[0 .. n) = the items 0 .. n-1 in the order std::sort leaves them when it sorts the items
 * in index order, comparing rank[i] < rank[j]: increasing rank, and equal ranks in the order its
 * partitions leave them (Note [torch's order of equal scores]). Ranks code the values in their
 * order (equal values, equal ranks), each < n. DK_EINVAL for a rank >= n or n >= 2^31. scratch:
 * dk_std_sort_scratch_bytes(n) bytes.
 */
DK_API dk_status dk_std_sort_order(int64_t *perm, const uint32_t *rank, int64_t n, void *scratch);

/*
 * The same, told only what it must: for the items tied[0 .. ntied) (increasing indices), the ones
 * whose rank another item shares, within[j] = how many items of tied[j]'s rank std::sort leaves
 * before it. Every other item's place follows from its rank alone, so a caller that knows where
 * each rank starts (dkit's own sorted result) writes the order without a pass over all n.
 * DK_EINVAL for a rank >= n, a tied index >= n or out of increasing order, n >= 2^31.
 */
DK_API dk_status dk_std_sort_ties(uint32_t *within, const uint32_t *rank, int64_t n, const uint32_t *tied,
                                  int64_t ntied, void *scratch);

/* The bytes of scratch memory each function needs for n items (8-byte aligned; its contents
 * are not read): 32 per item for dk_std_sort_order, 20 for dk_std_sort_ties. The caller provides
 * it, so that a caller that runs every step of a training loop can keep it mapped (a fresh block
 * of this size is faulted in page by page). */
DK_API size_t dk_std_sort_scratch_bytes(int64_t n);
DK_API size_t dk_std_sort_ties_scratch_bytes(int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* DK_STD_SORT_H */
