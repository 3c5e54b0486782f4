//! The process' allocator: mimalloc, called by its plain entry points whenever the alignment
//! asked for is one every mimalloc block has anyway.
//!
//! Why not `mimalloc::MiMalloc` as it is: it passes every request to `mi_malloc_aligned`, whose
//! fast path (mimalloc 3) checks the alignment, looks for a free block of the size and then
//! checks that block's alignment, and whose slow path, taken by every request above 1 KiB that
//! is not a power of two (a response buffer of 1.5 KiB, say), allocates `size + alignment` and
//! aligns within it. Measured under callgrind (`scripts/callgrind-send.sh`)
//! at ~70 instructions per allocation, ~31 allocations per durable SendMessage; through
//! `mi_malloc` ~40, which took ~1 000 instructions off each SendMessage.
//!
//! Why that is sound: every mimalloc block is aligned to at least a machine word, because block
//! sizes are multiples of the word size and pages start aligned (mimalloc's own `mi_malloc` is
//! documented to serve `malloc`, which must return memory aligned for any scalar type). So a
//! request whose alignment is at most a word is served by `mi_malloc` / `mi_zalloc` /
//! `mi_realloc`, and anything else by the aligned entry points, as before. Frees are `mi_free`
//! either way (mimalloc finds the block's page from its address).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every mimalloc block has: a machine word.
const WORD_ALIGN_BYTES: usize = std::mem::size_of::<usize>();

/// mimalloc, through its plain entry points where the alignment allows (see the module's
/// comment).
pub struct Mimalloc;

// SAFETY: every method forwards to mimalloc, which returns blocks of at least the size asked for,
// aligned to at least `WORD_ALIGN_BYTES` by the plain entry points and to `layout.align()` by
// the aligned ones; the plain ones are used only when `layout.align() <= WORD_ALIGN_BYTES`.
// `realloc` keeps the layout's alignment (the contract of `GlobalAlloc::realloc`), so it takes
// the same branch as the allocation did.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD_ALIGN_BYTES {
            unsafe { ffi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            unsafe { ffi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD_ALIGN_BYTES {
            unsafe { ffi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            unsafe { ffi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { ffi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD_ALIGN_BYTES {
            unsafe { ffi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            unsafe {
                ffi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size class up to a few pages, at every alignment up to 4 KiB, allocated, zeroed,
    /// grown and shrunk: each block is aligned as asked, zeroed when asked, and keeps its bytes
    /// across a reallocation.
    #[test]
    fn blocks_are_aligned_and_keep_their_bytes() {
        let allocator = Mimalloc;
        let mut sizes: Vec<usize> = (1..=256).collect();
        sizes.extend([
            1000,
            1023,
            1024,
            1025,
            4095,
            4096,
            16 << 10,
            (16 << 10) + 1,
            1 << 20,
        ]);
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for &size in &sizes {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert!(!zeroed.is_null());
                    assert_eq!(zeroed as usize % align, 0, "size {size} align {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size)
                        .iter()
                        .all(|&b| b == 0));
                    allocator.dealloc(zeroed, layout);

                    let block = allocator.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size} align {align}");
                    for i in 0..size {
                        *block.add(i) = i as u8;
                    }
                    let grown_size = size * 3 + 7;
                    let grown = allocator.realloc(block, layout, grown_size);
                    assert!(!grown.is_null());
                    assert_eq!(grown as usize % align, 0, "grown {size} align {align}");
                    let grown_layout = Layout::from_size_align(grown_size, align).unwrap();
                    let shrunk_size = size.div_ceil(2);
                    let shrunk = allocator.realloc(grown, grown_layout, shrunk_size);
                    assert!(!shrunk.is_null());
                    assert_eq!(shrunk as usize % align, 0, "shrunk {size} align {align}");
                    for i in 0..shrunk_size {
                        assert_eq!(*shrunk.add(i), i as u8);
                    }
                    let shrunk_layout = Layout::from_size_align(shrunk_size, align).unwrap();
                    allocator.dealloc(shrunk, shrunk_layout);
                }
            }
        }
    }
}
