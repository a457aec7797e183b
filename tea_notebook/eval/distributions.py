"""The few distribution functions the statistics of :mod:`tea_notebook.eval.stats` need, computed
here so that the library does not depend on scipy (the tests check each against it).

* the regularized incomplete beta function ``I_x(a, b)``, by its continued fraction (evaluated with
  the modified Lentz method) and the symmetry ``I_x(a, b) = 1 − I_{1−x}(b, a)``;
* Student's t: ``P(T ≤ t) = 1 − ½ · I_{ν/(ν+t²)}(ν/2, ½)`` for t ≥ 0, its quantile by inverting that
  with Newton steps kept inside a bisection bracket (within about 1e-10);
* the noncentral t (the power of a t-test): ``P(T > c) = E[Φ(δ − c·√(V/ν))]`` with V ~ χ²_ν,
  integrated over ``u = √V`` by Simpson's rule;
* the binomial tail at p = ½ (McNemar's exact test): ``Σ_{i≤k} C(n, i) / 2ⁿ`` in exact integers.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

from tea_notebook.errors import TeaError

_NORMAL = NormalDist()
_TINY = 1e-300


def normal_cdf(x: float) -> float:
    """Φ(x), the standard normal distribution function."""
    return _NORMAL.cdf(x)


def normal_quantile(p: float) -> float:
    """Φ⁻¹(p), the standard normal quantile (0 < p < 1)."""
    _check_probability(p)
    return _NORMAL.inv_cdf(p)


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b) = B(x; a, b) / B(a, b)`` for 0 ≤ x ≤ 1,
    a, b > 0: the continued fraction ``x^a (1−x)^b / (a B(a, b)) · 1 / (1 + d₁ / (1 + d₂ / …))``
    where it converges fast (x < (a+1)/(a+b+2)), the symmetry ``1 − I_{1−x}(b, a)`` elsewhere."""
    if a <= 0 or b <= 0:
        raise TeaError(f"the incomplete beta function needs a, b > 0, not a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise TeaError(f"the incomplete beta function is defined for 0 ≤ x ≤ 1, not x={x}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (even terms d₂ₘ, odd terms d₂ₘ₊₁),
    evaluated front to back with the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    value = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            value *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return value


def t_cdf(t: float, df: float) -> float:
    """``P(T ≤ t)`` for Student's t with ``df`` degrees of freedom: ``½ · I_{ν/(ν+t²)}(ν/2, ½)`` is
    the tail beyond |t|."""
    if df <= 0:
        raise TeaError(f"Student's t needs positive degrees of freedom, not {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2, 0.5)
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, df: float) -> float:
    """Student's t density: ``Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) · (1 + t²/ν)^(−(ν+1)/2)``."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=1024)  # pure, and ~0.4 ms a call: the gate and the planner ask for the same ones
def t_quantile(p: float, df: float) -> float:
    """The t with ``P(T ≤ t) = p`` for Student's t with ``df`` degrees of freedom: Newton steps on
    :func:`t_cdf` from the normal quantile, each kept inside a shrinking bisection bracket (accurate
    to about 1e-10 relative, checked against scipy in the tests)."""
    _check_probability(p)
    if df <= 0:
        raise TeaError(f"Student's t needs positive degrees of freedom, not {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2
        if high > 1e300:
            raise TeaError(f"the t quantile of p={p} with {df} degrees of freedom is out of range")
    t = min(max(normal_quantile(p), low), high)
    for _ in range(200):
        error = t_cdf(t, df) - p
        if error > 0:
            high = t
        else:
            low = t
        density = t_pdf(t, df)
        step = error / density if density > 0 else math.inf
        candidate = t - step
        if not low < candidate < high:
            candidate = (low + high) / 2  # Newton left the bracket: bisect instead
        if abs(candidate - t) <= 1e-14 * max(1.0, abs(t)):
            return candidate
        t = candidate
    return t


def noncentral_t_sf(c: float, df: float, noncentrality: float, *, intervals: int = 2000) -> float:
    """``P(T > c)`` for a noncentral t, ``T = (Z + δ) / √(V/ν)`` with Z normal and V ~ χ²_ν:
    ``∫ Φ(δ − c·u/√ν) f(u) du`` with f the density of ``u = √V`` (a χ distribution), by Simpson's rule
    over u within about 12 standard deviations of its mode."""
    if df <= 0:
        raise TeaError(f"the noncentral t needs positive degrees of freedom, not {df}")
    mode = math.sqrt(max(df - 1.0, 0.0))
    low, high = max(0.0, mode - 12.0), mode + 12.0
    h = (high - low) / intervals
    # log of the χ density's constant: 2 / (2^(ν/2) Γ(ν/2)); the density is that times u^(ν−1) e^(−u²/2)
    log_const = math.log(2.0) - (df / 2) * math.log(2.0) - math.lgamma(df / 2)
    root = math.sqrt(df)
    total = 0.0
    for i in range(intervals + 1):
        u = low + i * h
        if u <= 0.0:
            density = math.exp(log_const) if df == 1 else 0.0
        else:
            density = math.exp(log_const + (df - 1) * math.log(u) - u * u / 2)
        weight = 1 if i in (0, intervals) else (4 if i % 2 else 2)
        total += weight * density * normal_cdf(noncentrality - c * u / root)
    return min(1.0, max(0.0, total * h / 3))


def binomial_cdf_half(k: int, n: int) -> float:
    """``P(X ≤ k)`` for X ~ Binomial(n, ½): ``Σ_{i=0..k} C(n, i) / 2ⁿ``, summed in exact integers."""
    if n < 0 or k < 0:
        raise TeaError(f"a binomial tail needs k, n ≥ 0, not k={k}, n={n}")
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def _check_probability(p: float) -> None:
    if not 0.0 < p < 1.0:
        raise TeaError(f"a probability strictly between 0 and 1 is needed, not {p}")


__all__ = [
    "binomial_cdf_half",
    "incomplete_beta",
    "noncentral_t_sf",
    "normal_cdf",
    "normal_quantile",
    "t_cdf",
    "t_pdf",
    "t_quantile",
]
