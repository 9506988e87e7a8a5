"""The workload's model: the SwinV2 backbone (registered in MMSeg) and the UperNet segmentor."""
