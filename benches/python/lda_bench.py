"""The Python side of `cargo bench-harp lda`: the `lda` package (collapsed Gibbs
sampling) on a UCI bag-of-words file, timed, with its final counts written out.

Reads `docword.txt` (D, W, NNZ, then `docID wordID count` lines, 1-based), fits
`lda.LDA(n_topics, n_iter, alpha, eta=beta, random_state=seed)` and prints one JSON line:
the seconds `fit` took, the tokens, and the package's own log likelihood. With `--counts`
it writes the final count matrices as little-endian int32, in this order: `ndz` (D x K),
then `nzw` (K x W), so the caller computes log p(w, z) with its own formula from the very
same counts.
"""

import argparse
import json
import sys
import time

import numpy as np
import lda


def load_docword(path):
    with open(path, "rb") as f:
        docs = int(f.readline())
        words = int(f.readline())
        nnz = int(f.readline())
        entries = np.loadtxt(f, dtype=np.int64, ndmin=2)
    if entries.shape[0] != nnz:
        sys.exit(f"{path}: the header declares {nnz} entries, found {entries.shape[0]}")
    matrix = np.zeros((docs, words), dtype=np.int32)
    matrix[entries[:, 0] - 1, entries[:, 1] - 1] = entries[:, 2]
    return matrix


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--docword", required=True)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--counts", help="write ndz and nzw (int32, little-endian) here")
    args = parser.parse_args()

    matrix = load_docword(args.docword)
    model = lda.LDA(
        n_topics=args.topics,
        n_iter=args.iterations,
        alpha=args.alpha,
        eta=args.beta,
        random_state=args.seed,
        # The package computes its log likelihood every `refresh` sweeps: once, at the end.
        refresh=args.iterations,
    )
    start = time.perf_counter()
    model.fit(matrix)
    seconds = time.perf_counter() - start
    if args.counts:
        with open(args.counts, "wb") as out:
            out.write(np.ascontiguousarray(model.ndz_, dtype="<i4").tobytes())
            out.write(np.ascontiguousarray(model.nzw_, dtype="<i4").tobytes())
    print(
        json.dumps(
            {
                "fit_s": seconds,
                "docs": int(matrix.shape[0]),
                "words": int(matrix.shape[1]),
                "tokens": int(matrix.sum()),
                "package_log_likelihood": float(model.loglikelihood()),
                "lda_version": lda.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
