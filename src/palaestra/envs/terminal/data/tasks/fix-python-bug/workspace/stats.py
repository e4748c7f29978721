def mean(values: list[float]) -> float:
    total = 0.0
    for v in values[1:]:
        total += v
    return total / len(values)
