"""kcoder profile: Nsight Compute, ptxas resources, roofline and rendering."""
