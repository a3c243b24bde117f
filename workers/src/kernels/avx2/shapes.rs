//! The kernels' entry points by shape: each tile, decode and packed
//! kernel is compiled once per shape it is called with (rows by tokens, or
//! tokens), and one function per kernel dispatches a call to its shape.

use super::{f16x16, gemv, iq4, k23, ktile, tile, vnni, x8, x8k, x8k23, x16, x16k23};

/// One tile function per element type, dispatching on the tile's shape to
/// the kernel compiled for it; every shape up to the full tile is listed,
/// so the edges of a product take the same path as its interior.
macro_rules! tile_shapes {
    ($name:ident, $module:ident :: $kernel:ident, [$(($r:literal, $t:literal)),*]) => {
        #[allow(unsafe_code)]
        pub(super) fn $name(w: &[&[u8]], a: &[&[u8]], out: &mut [f32], stride: usize) {
            // SAFETY: only installed by `kernels()` after the features the
            // kernel enables were detected on this processor.
            match (w.len(), a.len()) {
                $(($r, $t) => unsafe { $module::$kernel::<$r, $t>(w, a, out, stride) },)*
                shape => panic!("no tile of {shape:?}"),
            }
        }
    };
}

macro_rules! q0_shapes {
    ($name:ident, $module:ident :: $kernel:ident) => {
        tile_shapes!(
            $name,
            $module::$kernel,
            [
                (1, 1),
                (1, 2),
                (1, 3),
                (2, 1),
                (2, 2),
                (2, 3),
                (3, 1),
                (3, 2),
                (3, 3),
                (4, 1),
                (4, 2),
                (4, 3)
            ]
        );
    };
}

macro_rules! six_shapes {
    ($name:ident, $module:ident :: $kernel:ident) => {
        tile_shapes!(
            $name,
            $module::$kernel,
            [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
        );
    };
}

q0_shapes!(tile_q8_0, tile::q8_0);
q0_shapes!(tile_q4_0, tile::q4_0);
q0_shapes!(vnni_q8_0, vnni::q8_0);
q0_shapes!(vnni_q4_0, vnni::q4_0);
q0_shapes!(vnni_q5_0, vnni::q5_0);
q0_shapes!(vnni_q4_1, vnni::q4_1);
q0_shapes!(vnni_q5_1, vnni::q5_1);
q0_shapes!(avx_vnni_q8_0, vnni::q8_0_avx_vnni);
// Two tokens a 512-bit register: up to six rows by six tokens.
tile_shapes!(
    wide_q8_0,
    vnni::q8_0_wide,
    [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (2, 5),
        (2, 6),
        (3, 1),
        (3, 2),
        (3, 3),
        (3, 4),
        (3, 5),
        (3, 6),
        (4, 1),
        (4, 2),
        (4, 3),
        (4, 4),
        (4, 5),
        (4, 6),
        (5, 1),
        (5, 2),
        (5, 3),
        (5, 4),
        (5, 5),
        (5, 6),
        (6, 1),
        (6, 2),
        (6, 3),
        (6, 4),
        (6, 5),
        (6, 6)
    ]
);
tile_shapes!(
    tile_f16,
    tile::f16_rows,
    [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
);
six_shapes!(tile_q4k, ktile::q4k);
// One slice a pair of rows (`kernels::pairs`).
tile_shapes!(pair_f16, tile::f16_pair, [(1, 1), (1, 2), (1, 3)]);
tile_shapes!(
    wide_pair_f16,
    f16x16::pair,
    [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4)
    ]
);
six_shapes!(tile_q5k, ktile::q5k);
six_shapes!(tile_q5k_bytes, ktile::q5k_bytes);
six_shapes!(vnni_q5k_bytes, ktile::q5k_vnni_bytes);
six_shapes!(tile_q6k, ktile::q6k);
six_shapes!(tile_q3k, k23::q3k);
six_shapes!(tile_q2k, k23::q2k);
six_shapes!(vnni_q4k, ktile::q4k_vnni);
six_shapes!(vnni_q5k, ktile::q5k_vnni);
six_shapes!(vnni_q6k, ktile::q6k_vnni);

/// The decode kernels: one token against each shape of rows listed.
macro_rules! decode_shapes {
    ($shapes:tt $($name:ident = $module:ident :: $kernel:ident),*) => {
        $(tile_shapes!($name, $module::$kernel, $shapes);)*
    };
}

decode_shapes!([(1, 1), (2, 1), (3, 1), (4, 1)] gemv_q8_0 = gemv::q8_0, gemv_q4_0 = gemv::q4_0);
decode_shapes!([(1, 1)] next_f16 = tile::f16_next);
decode_shapes!([(1, 1)] wide_next_f16 = f16x16::next);
tile_shapes!(
    wide_f16,
    f16x16::rows,
    [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (3, 1),
        (3, 2),
        (3, 3),
        (3, 4),
        (4, 1),
        (4, 2),
        (4, 3),
        (4, 4)
    ]
);
decode_shapes!(
    [(1, 1), (2, 1), (3, 1), (4, 1)]
    next_q8_0 = tile::q8_0_next,
    next_q4_0 = tile::q4_0_next
);
decode_shapes!(
    [(1, 1), (2, 1)]
    next_q4k = ktile::q4k_next,
    next_q5k = ktile::q5k_next,
    next_q6k = ktile::q6k_next,
    next_q3k = k23::q3k_next,
    next_q2k = k23::q2k_next,
    vnni_next_q4k = ktile::q4k_vnni_next,
    vnni_next_q5k = ktile::q5k_vnni_next,
    vnni_next_q6k = ktile::q6k_vnni_next
);

/// The packed kernels (`kernels::x8`: one group a call in `x8`, two in
/// `x16`), dispatching on the number of tokens to the kernel compiled for
/// it (and, for `x8`'s, whether one token asks for its bytes ahead).
macro_rules! packed_tokens {
    ($($name:ident = $module:ident :: $kernel:ident $(< $($c:literal),+ >)?),*) => {$(
        #[allow(unsafe_code)]
        pub(super) fn $name(g: &[u8], a: &[&[u8]], s: &[&[i32]], out: &mut [[f32; crate::kernels::x8::ROWS]]) {
            // SAFETY: only installed by `kernels()` or `kernels_vnni()`
            // after the features the kernel enables were detected on this
            // processor.
            match a.len() {
                1 => unsafe { $module::$kernel::<1 $($(, $c)+)?>(g, a, s, out) },
                2 => unsafe { $module::$kernel::<2 $($(, $c)+)?>(g, a, s, out) },
                3 => unsafe { $module::$kernel::<3 $($(, $c)+)?>(g, a, s, out) },
                4 => unsafe { $module::$kernel::<4 $($(, $c)+)?>(g, a, s, out) },
                n => panic!("no packed kernel for {n} tokens"),
            }
        }
    )*};
}

packed_tokens!(
    x8_q4_0_vnni = x8::q4_0_vnni<true, false>,
    x8_q4_0_avx2 = x8::q4_0_avx2<true, false>,
    x8_q4k_vnni = x8k::q4k_vnni<true, false>,
    x8_q4k_avx2 = x8k::q4k_avx2<true, false>,
    x8_q5k_vnni = x8k::q4k_vnni<true, true>,
    x8_q5k_avx2 = x8k::q4k_avx2<true, true>,
    flat_q5k_vnni = x8k::q4k_vnni<false, true>,
    flat_q5k_avx2 = x8k::q4k_avx2<false, true>,
    x16_q5k_vnni = x16::q4k_vnni<true>,
    x8_q3k_vnni = x8k23::q3k_vnni<true>,
    x8_q3k_avx2 = x8k23::q3k_avx2<true>,
    flat_q3k_vnni = x8k23::q3k_vnni<false>,
    flat_q3k_avx2 = x8k23::q3k_avx2<false>,
    x8_q2k_vnni = x8k23::q2k_vnni<true>,
    x8_q2k_avx2 = x8k23::q2k_avx2<true>,
    flat_q2k_vnni = x8k23::q2k_vnni<false>,
    flat_q2k_avx2 = x8k23::q2k_avx2<false>,
    flat_q4_0_vnni = x8::q4_0_vnni<false, false>,
    flat_q4_0_avx2 = x8::q4_0_avx2<false, false>,
    flat_q4k_vnni = x8k::q4k_vnni<false, false>,
    flat_q4k_avx2 = x8k::q4k_avx2<false, false>,
    x16_q4_0_vnni = x16::q4_0_vnni<false>,
    x16_q4k_vnni = x16::q4k_vnni<false>,
    x8_iq4nl_vnni = x8::q4_0_vnni<true, true>,
    x8_iq4nl_avx2 = x8::q4_0_avx2<true, true>,
    flat_iq4nl_vnni = x8::q4_0_vnni<false, true>,
    flat_iq4nl_avx2 = x8::q4_0_avx2<false, true>,
    x16_iq4nl_vnni = x16::q4_0_vnni<true>,
    x8_iq4xs_vnni = iq4::iq4xs_vnni<true>,
    x8_iq4xs_avx2 = iq4::iq4xs_avx2<true>,
    flat_iq4xs_vnni = iq4::iq4xs_vnni<false>,
    flat_iq4xs_avx2 = iq4::iq4xs_avx2<false>,
    x16_iq4xs_vnni = x16::iq4xs_vnni,
    x16_q3k_vnni = x16k23::q3k_vnni,
    x16_q2k_vnni = x16k23::q2k_vnni
);
