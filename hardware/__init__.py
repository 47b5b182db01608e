"""What the GPU can do: spec sheets, measured ceilings, and the roofline that relates the two.

matplotlib is only needed when a roofline is drawn; everything else is standard library.
"""

from hardware.measure import Measured, MeasureError, cached, comparison_rows, measure
from hardware.roofline import Ceilings, KernelPoint, plot_roofline
from hardware.specs import GpuSpec, SpecError, default_spec, load_specs, spec_for

__all__ = ["Ceilings", "GpuSpec", "KernelPoint", "MeasureError", "Measured", "SpecError",
           "cached", "comparison_rows", "default_spec", "load_specs", "measure", "plot_roofline",
           "spec_for"]
