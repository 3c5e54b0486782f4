//! The MD5s of a SendMessageBatch's bodies (`leaseq_core::md5_lanes`): ten 256-byte bodies (W2's
//! batches), and one, by each kernel this CPU has (`scalar`, the `md-5` crate one body at a time;
//! `avx2`, eight at a time; `avx512`, sixteen at a time), reported per body.
//!
//! callgrind cannot compare the kernels: valgrind emulates no AVX-512, so under it the server
//! takes the AVX2 kernel. This measures time, on this machine's CPU.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leaseq_core::md5_lanes;

fn bodies(criterion: &mut Criterion) {
    let bodies: Vec<Vec<u8>> = (0..10u8).map(|seed| vec![b'a' + seed; 256]).collect();
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let mut group = criterion.benchmark_group("md5");
    for count in [10, 1] {
        group.throughput(Throughput::Elements(count as u64));
        for (kernel, digests) in md5_lanes::kernels() {
            group.bench_with_input(
                BenchmarkId::new(kernel, format!("{count}x256B")),
                &bodies[..count],
                |bench, bodies| bench.iter(|| digests(black_box(bodies))),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bodies);
criterion_main!(benches);
