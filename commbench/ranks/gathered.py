"""Named figures across ranks. Each rank gives a dict of named fields, each a number, a list of
numbers or a list of equal lists of numbers, with the same names and shapes on every rank (they
follow from the flags, which every rank shares); every rank gets every rank's dict back, in rank
order, through one all_gather of float64 (Comm.gather_figures). Figures are written and read by
name: no figure's place in a flat list is kept in step by hand between the writer and the
reader.

    rows = gathered.gather(comm, {"mean_s": timing.mean, "windows_s": [0.1, 0.2]})
    rows[0]["windows_s"]  # rank 0's, a list again

A number comes back as a float (int() what counts); NaN passes through (a missing figure)."""


def _shape(name, value):
    if isinstance(value, (int, float)):
        return ()
    value = list(value)
    if not value or isinstance(value[0], (int, float)):
        return (len(value),)
    inner = {len(list(row)) for row in value}
    if len(inner) != 1:
        raise ValueError(f"gathered: {name}: rows of different lengths {sorted(inner)}")
    return (len(value), inner.pop())


def flatten(fields):
    """(layout, values): layout is [(name, shape)], values the floats in that order."""
    layout, values = [], []
    for name, value in fields.items():
        shape = _shape(name, value)
        layout.append((name, shape))
        if shape == ():
            values.append(float(value))
        elif len(shape) == 1:
            values += [float(x) for x in value]
        else:
            values += [float(x) for row in value for x in row]
    return layout, values


def unflatten(layout, row):
    """The dict of one rank's `row` (floats in `layout`'s order)."""
    out, at = {}, 0
    for name, shape in layout:
        if shape == ():
            out[name] = row[at]
            at += 1
        elif len(shape) == 1:
            out[name] = list(row[at:at + shape[0]])
            at += shape[0]
        else:
            count, width = shape
            out[name] = [list(row[at + k * width:at + (k + 1) * width]) for k in range(count)]
            at += count * width
    if at != len(row):
        raise ValueError(f"gathered: {len(row)} figures for a layout of {at}")
    return out


def gather(comm, fields):
    """Every rank's `fields` (a dict: the same names and shapes on every rank), on every rank."""
    layout, values = flatten(fields)
    return [unflatten(layout, row) for row in comm.gather_figures(values)]
